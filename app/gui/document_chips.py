"""The documents attached to the open chat, as chips above the composer ("report.pdf ·
12 pages ×"), and what a drop of files onto the chat carries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QMimeData, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget

if TYPE_CHECKING:
    from app.documents.library import AttachedDocument


def local_files(mime: QMimeData) -> list[Path]:
    """The local files a drag carries (folders and web links are not documents)."""
    if not mime.hasUrls():
        return []
    return [Path(url.toLocalFile()) for url in mime.urls()
            if url.isLocalFile() and Path(url.toLocalFile()).is_file()]


def size_text(doc: AttachedDocument) -> str:
    if doc.pages:
        return f"{doc.pages} page" + ("s" if doc.pages != 1 else "")
    return f"{doc.characters:,} characters"


class DocumentChip(QFrame):
    detach_requested = Signal(int)  # the document's id

    def __init__(self, doc: AttachedDocument) -> None:
        super().__init__()
        self.setObjectName("document-chip")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.document = doc
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 1, 2, 1)
        row.setSpacing(4)
        self.label = QLabel(f"{doc.name} · {size_text(doc)}")
        self.label.setToolTip(f"{doc.name}: {doc.kind}, {doc.characters:,} characters. "
                              "The model is given it with each question in this chat.")
        row.addWidget(self.label)
        self.remove = QToolButton()
        self.remove.setText("×")
        self.remove.setAutoRaise(True)
        self.remove.setToolTip(f"Detach {doc.name} from this chat")
        self.remove.clicked.connect(lambda: self.detach_requested.emit(doc.id))
        row.addWidget(self.remove)


class DocumentChips(QWidget):
    """One chip per attached document; hidden when the chat has none."""
    detach_requested = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("document-chips")
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch(1)
        self.chips: list[DocumentChip] = []
        self.hide()

    def set_documents(self, docs: list[AttachedDocument]) -> None:
        for chip in self.chips:
            self.row.removeWidget(chip)
            chip.hide()
            chip.deleteLater()
        self.chips = []
        for doc in docs:
            chip = DocumentChip(doc)
            chip.detach_requested.connect(self.detach_requested)
            self.row.insertWidget(self.row.count() - 1, chip)
            self.chips.append(chip)
        self.setVisible(bool(docs))

    def names(self) -> list[str]:
        return [c.document.name for c in self.chips]
