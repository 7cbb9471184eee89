"""Reading the files attached to a chat, off the UI thread (AttachTask). What of them goes
with a question is chosen by the chat session (app.chat.documents), on the turn's thread.

app.documents is imported where it is used: the window's other parts never wait on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal

from app.gui.thread_task import ThreadTask
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
