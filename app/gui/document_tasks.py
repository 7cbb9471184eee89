"""The chat's document work, off the UI thread: reading attached files (AttachTask), and
choosing what of them goes with a question (DocumentContextTask: load the model, count the
conversation, embed and retrieve when the documents do not fit whole).

app.documents is imported where it is used: the window's other parts never wait on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal

from app.chat.request import TurnOptions
from app.config import Paths
from app.gui.thread_task import ThreadTask
from app.runtime import Runtime
from backends.base import GenerationRequest
from backends.errors import EmberError

if TYPE_CHECKING:
    from app.documents.library import DocumentLibrary


class AttachTask(ThreadTask):
    """Read and store files for a conversation, one after the other."""
    thread_name = "ember-gui-attach"
    progress = Signal(str)
    attached = Signal(object)  # app.documents.library.AttachedDocument
    failed = Signal(str)  # why a file could not be attached (its DocumentError: name and why)
    done = Signal()

    def __init__(self, library: DocumentLibrary, conversation_id: int,
                 files: list[Path]) -> None:
        super().__init__()
        self.library, self.conversation_id, self.files = library, conversation_id, files

    def _run(self) -> None:
        for path in self.files:
            self.progress.emit(f"Reading {path.name}…")
            try:
                doc = self.library.attach(self.conversation_id, path)
            except EmberError as e:  # DocumentError: the file's name and why
                self.failed.emit(str(e))
            except Exception as e:  # a bug in a reader must not stop the others
                self.failed.emit(f"{path.name}: could not be read ({type(e).__name__}: {e})")
            else:
                self.attached.emit(doc)
        self.done.emit()


class DocumentContextTask(ThreadTask):
    """What of the chat's documents goes with `question` in `request`'s conversation, for
    `model` (loaded first, as the answer will load it)."""
    thread_name = "ember-gui-documents"
    progress = Signal(str)
    loaded = Signal(object)  # app.runtime.LoadedModel
    ready = Signal(object)  # app.documents.context.DocumentContext
    failed = Signal(str, str)  # why, and the embedding model to download ("" when not that)

    def __init__(self, runtime: Runtime, library: DocumentLibrary, conversation_id: int,
                 question: str, model: str, request: GenerationRequest,
                 load: tuple[int | None, str | None, int | None, str | None],
                 home: Paths | None = None) -> None:
        super().__init__()
        self.home = home  # config.toml's folder: the embedding model setting
        self.runtime, self.library, self.model = runtime, library, model
        self.conversation_id, self.question, self.request = conversation_id, question, request
        self.load = load  # context, backend, gpu layers, KV cache type (as GenerationTask)

    def _run(self) -> None:
        from app.chat.documents import MissingEmbedderError, choose_documents

        context, backend, gpu_layers, kv_cache = self.load
        options = TurnOptions(self.request.sampling, None, context, backend, gpu_layers,
                              kv_cache)
        try:
            chosen = choose_documents(self.runtime, self.library, self.conversation_id,
                                      self.question, self.model, self.request, options,
                                      self.home, self.progress.emit, self.loaded.emit)
        except MissingEmbedderError as e:
            self.failed.emit(str(e), e.model)
        except EmberError as e:
            self.failed.emit(str(e), "")
        except Exception as e:  # a bug must not leave the window waiting forever
            self.failed.emit(f"{type(e).__name__}: {e}", "")
        else:
            self.ready.emit(chosen)
