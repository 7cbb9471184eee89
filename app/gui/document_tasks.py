"""The chat's document work, off the UI thread: reading attached files (AttachTask), and
choosing what of them goes with a question (DocumentContextTask: load the model, count the
conversation, embed and retrieve when the documents do not fit whole).

app.documents is imported where it is used: the window's other parts never wait on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal

from app.config import Paths
from app.gui.thread_task import ThreadTask
from app.runtime import Runtime
from backends.base import GenerationRequest
from backends.errors import EmberError

if TYPE_CHECKING:
    from app.documents.embedder import Embedder
    from app.documents.library import DocumentLibrary

# A remote server keeps its context and its tokenizer to itself: documents get this many
# tokens, counted at CHARS_PER_TOKEN (English prose and code average 3.5-4 characters a token
# in the BPE vocabularies of today's models; 3 leaves a margin for other languages).
REMOTE_DOCUMENT_TOKENS = 4096
CHARS_PER_TOKEN = 3
# The room kept for the answer: the chat's max_tokens, but never more than a quarter of the
# context, so documents still go in when max_tokens is set as high as the context itself.
ANSWER_SHARE = 4
MIN_DOCUMENT_TOKENS = 64  # less than this cannot hold one useful piece


class NoRoomError(EmberError):
    pass


@dataclass(frozen=True)
class Budget:
    context: int  # the model's context (tokens)
    conversation: int  # the conversation's prompt so far
    answer: int  # kept for the answer

    @property
    def documents(self) -> int:
        return self.context - self.conversation - self.answer


def budget_for(context: int, conversation: int, max_tokens: int) -> Budget:
    """What is left for the documents; NoRoomError says why when it is too little."""
    budget = Budget(context, conversation, min(max_tokens, context // ANSWER_SHARE))
    if budget.documents < MIN_DOCUMENT_TOKENS:
        raise NoRoomError(
            f"no room for the documents: the conversation takes {conversation:,} of the "
            f"model's {context:,} tokens of context and {budget.answer:,} are kept for the "
            "answer. Start a new chat with the documents, or raise the context length in "
            "Settings.")
    return budget


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
        missing = ""
        try:
            embedder, missing = self._embedder()
            budget, count = self._budget()
            context = self.library.context_for(self.conversation_id, self.question,
                                               budget.documents, count, embedder,
                                               self.progress.emit)
        except EmberError as e:
            self.failed.emit(str(e), missing)
        except Exception as e:  # a bug must not leave the window waiting forever
            self.failed.emit(f"{type(e).__name__}: {e}", missing)
        else:
            self.ready.emit(context)

    def _embedder(self) -> tuple[Embedder | None, str]:
        """The embedding model when it is installed, else None and its name (documents that
        fit whole need none; the window offers the download when they do not)."""
        from app.documents.embedder import RuntimeEmbedder, embedding_model_setting

        ref = embedding_model_setting(self.home)
        try:
            self.runtime.store.get(ref)
        except EmberError:
            return None, ref
        return RuntimeEmbedder(self.runtime, ref), ""

    def _budget(self) -> tuple[Budget, Callable[[str], int]]:
        if self.runtime.is_remote(self.model):
            def estimate(text: str) -> int:
                return len(text) // CHARS_PER_TOKEN + 1
            return Budget(REMOTE_DOCUMENT_TOKENS, 0, 0), estimate
        context, backend, gpu_layers, kv_cache = self.load
        self.progress.emit(f"Loading {self.model}…")
        loaded = self.runtime.load(self.model, context, backend, gpu_layers,
                                   kv_cache=kv_cache)
        self.loaded.emit(loaded)
        self.progress.emit("Counting the conversation…")
        conversation = self.runtime.count_prompt_tokens(self.model, self.request, backend)

        def count(text: str) -> int:
            return len(self.runtime.tokenize(self.model, text))
        # None: until the context is full; the answer keeps a quarter of it (budget_for)
        max_tokens = self.request.sampling.max_tokens or loaded.plan.context
        return budget_for(loaded.plan.context, conversation, max_tokens), count
