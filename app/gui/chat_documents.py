"""The open chat's documents in the window: attaching files (read off the UI thread, each
unreadable one named with why), the chips that show and detach them, and the sources shown
under each answer. What goes with a question is chosen by app.gui.chat_controller (it knows
the conversation and the model).

The documents live in the document library (app.documents.library, `documents.db` beside the
history), per conversation, so they are there again when the chat is reopened.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.gui.chat_view import ChatView, MessageWidget
from app.gui.document_tasks import AttachTask
from app.gui.sources_block import Source, citations_of, sources_of
from app.history import StoredMessage

if TYPE_CHECKING:
    from app.documents.context import DocumentContext
    from app.documents.library import AttachedDocument, DocumentLibrary


class ChatDocuments(QObject):
    status = Signal(str)  # progress for the status bar ("" when done)
    attached = Signal(int)  # a document was attached to this conversation
    failed = Signal(str)  # the files that could not be attached, and why

    def __init__(self, library: DocumentLibrary, view: ChatView) -> None:
        super().__init__(view)
        self.library, self.view = library, view
        self.conversation_id: int | None = None
        self.task: AttachTask | None = None
        self._failures: list[str] = []
        self._count = 0
        view.chips.detach_requested.connect(self.detach)

    @property
    def attaching(self) -> bool:
        return self.task is not None

    def show(self, conversation_id: int | None) -> None:
        """The chips of `conversation_id`'s documents (None: a cleared chat, none)."""
        self.conversation_id = conversation_id
        self.view.chips.set_documents(self.documents())

    def documents(self) -> list[AttachedDocument]:
        if self.conversation_id is None:
            return []
        return self.library.documents(self.conversation_id)

    def attach(self, conversation_id: int, files: list[Path]) -> None:
        """Read and keep `files` for the conversation; the chips grow as each is read."""
        self.conversation_id = conversation_id
        self._failures, self._count = [], 0
        task = AttachTask(self.library, conversation_id, files)
        task.progress.connect(self.status)
        task.attached.connect(self._attached)
        task.failed.connect(self._failed)
        task.done.connect(self._done)
        self.task = task
        task.start()

    def _attached(self, doc: AttachedDocument) -> None:
        self._count += 1
        if doc.conversation_id == self.conversation_id:
            self.view.chips.set_documents(self.documents())
        self.attached.emit(doc.id)

    def _failed(self, why: str) -> None:
        self._failures.append(why)

    def _done(self) -> None:
        self.task = None
        self.status.emit(f"Attached {self._count} file(s)" if self._count else "")
        if self._failures:
            self.failed.emit("Not attached: " + " · ".join(self._failures))

    def detach(self, document_id: int) -> None:
        self.library.detach(document_id)
        self.view.chips.set_documents(self.documents())

    def sources(self, message: StoredMessage) -> list[Source]:
        """The pieces an answer was given: from the library, else the citations its stats
        keep (an imported conversation)."""
        used = self.library.used_by(message.id)
        return sources_of(used) if used is not None else citations_of(message.stats)

    def show_sources(self, widget: object, message: StoredMessage) -> None:
        if isinstance(widget, MessageWidget) and message.role == "assistant":
            widget.set_sources(self.sources(message))

    def used_by(self, message_id: int) -> DocumentContext | None:
        return self.library.used_by(message_id)

    def record(self, message_id: int, context: DocumentContext) -> None:
        self.library.record_use(message_id, context)
