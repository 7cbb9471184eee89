"""The conversation list: search, new (Ctrl+N), rename, delete with undo."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.history import History


class ConversationList(QWidget):
    selected = Signal(int)  # conversation id
    new_requested = Signal()
    deleted = Signal(int)

    def __init__(self, history: History) -> None:
        super().__init__()
        self.history = history
        self._undo_id: int | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.new = QPushButton("New chat")
        self.new.setToolTip("Ctrl+N")
        layout.addWidget(self.new)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setClearButtonEnabled(True)
        layout.addWidget(self.search)
        self.list = QListWidget()
        layout.addWidget(self.list, 1)
        buttons = QHBoxLayout()
        self.rename_button = QPushButton("Rename")
        self.delete_button = QPushButton("Delete")
        buttons.addWidget(self.rename_button)
        buttons.addWidget(self.delete_button)
        layout.addLayout(buttons)
        self.undo_bar = QWidget()
        undo_row = QHBoxLayout(self.undo_bar)
        undo_row.setContentsMargins(0, 0, 0, 0)
        self.undo_label = QLabel()
        self.undo_button = QPushButton("Undo")
        undo_row.addWidget(self.undo_label, 1)
        undo_row.addWidget(self.undo_button)
        self.undo_bar.hide()
        layout.addWidget(self.undo_bar)

        self.new.clicked.connect(self.new_requested)
        self.search.textChanged.connect(lambda _: self.refresh())
        self.list.currentItemChanged.connect(self._current_changed)
        self.rename_button.clicked.connect(self.rename_current)
        self.delete_button.clicked.connect(self.delete_current)
        self.undo_button.clicked.connect(self.undo_delete)
        self._refreshing = False

    def refresh(self, select: int | None = None) -> None:
        keep = select if select is not None else self.current_id()
        self._refreshing = True
        self.list.clear()
        for conv in self.history.conversations(self.search.text()):
            item = QListWidgetItem(conv.title)
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            item.setToolTip(f"{conv.title}\nmodel: {conv.model or 'default'}")
            self.list.addItem(item)
            if conv.id == keep:
                self.list.setCurrentItem(item)
        self._refreshing = False

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else None

    def _current_changed(self, item: QListWidgetItem | None, _prev: object) -> None:
        if item is not None and not self._refreshing:
            self.selected.emit(item.data(Qt.ItemDataRole.UserRole))

    def rename_current(self, title: str | None = None) -> None:
        conv_id = self.current_id()
        if conv_id is None:
            return
        if not isinstance(title, str):
            title, ok = QInputDialog.getText(self, "Rename conversation", "Title:",
                                             text=self.history.get(conv_id).title)
            if not ok:
                return
        if title.strip():
            self.history.rename(conv_id, title)
            self.refresh()

    def delete_current(self) -> None:
        conv_id = self.current_id()
        if conv_id is None:
            return
        title = self.history.get(conv_id).title
        self.history.delete(conv_id)
        self._undo_id = conv_id
        self.undo_label.setText(f"Deleted “{title[:30]}”")
        self.undo_bar.show()
        self.refresh()
        self.deleted.emit(conv_id)

    def undo_delete(self) -> None:
        if self._undo_id is None:
            return
        self.history.restore(self._undo_id)
        restored, self._undo_id = self._undo_id, None
        self.undo_bar.hide()
        self.refresh(select=restored)
        self.selected.emit(restored)
