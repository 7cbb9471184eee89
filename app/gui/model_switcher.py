"""Ctrl+K: a quick-pick popup over the window to type-filter the models and choose one, with
each model's fit badge. Up and Down move in the list while the filter keeps the keyboard."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.gui.icons import badge_icon
from app.gui.model_choices import ModelChoice, matches

MOVE_KEYS = (Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown)


class ModelSwitcher(QDialog):
    chosen = Signal(str)  # a model ref

    def __init__(self, choices: list[ModelChoice], current: str | None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("switcher")
        self.setMinimumWidth(560)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 10, 10, 10)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Switch model: type to filter, Enter picks, Esc closes")
        self.filter.setClearButtonEnabled(True)
        layout.addWidget(self.filter)
        self.list = QListWidget()
        self.list.setMinimumHeight(260)
        layout.addWidget(self.list)
        self.empty = QLabel("No model matches. Get more on the Models page.")
        self.empty.setObjectName("note")
        layout.addWidget(self.empty)
        for choice in choices:
            item = QListWidgetItem(choice.text)
            item.setData(Qt.ItemDataRole.UserRole, choice.ref)
            item.setToolTip(choice.detail)
            if choice.color:
                item.setIcon(badge_icon(choice.color))
            self.list.addItem(item)
            if choice.ref == current:
                self.list.setCurrentItem(item)
        self.choices = choices
        self.filter.textChanged.connect(self._filter)
        self.filter.returnPressed.connect(self._choose_current)
        self.filter.installEventFilter(self)
        self.list.itemActivated.connect(self._choose)
        self._filter("")

    def visible_refs(self) -> list[str]:
        return [self.list.item(i).data(Qt.ItemDataRole.UserRole)
                for i in range(self.list.count()) if not self.list.item(i).isHidden()]

    def _filter(self, text: str) -> None:
        first = None
        for i, choice in enumerate(self.choices):
            item = self.list.item(i)
            item.setHidden(not matches(choice, text))
            if first is None and not item.isHidden():
                first = item
        current = self.list.currentItem()
        if current is None or current.isHidden():
            self.list.setCurrentItem(first)
        self.empty.setVisible(first is None)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # the filter keeps the focus; Up/Down move the list's selection from there
        if watched is self.filter and event.type() == QEvent.Type.KeyPress and \
                isinstance(event, QKeyEvent) and event.key() in MOVE_KEYS:
            QApplication.sendEvent(self.list, QKeyEvent(event.type(), event.key(),
                                                        event.modifiers()))
            return True
        return super().eventFilter(watched, event)

    def _choose_current(self) -> None:
        item = self.list.currentItem()
        if item is not None and not item.isHidden():
            self._choose(item)

    def _choose(self, item: QListWidgetItem) -> None:
        self.chosen.emit(item.data(Qt.ItemDataRole.UserRole))
        self.accept()

    def popup(self) -> None:
        """Show near the top of the parent window, centred, with the filter ready to type."""
        parent = self.parentWidget()
        if parent is not None:
            top = parent.mapToGlobal(parent.rect().topLeft())
            self.adjustSize()
            self.move(top.x() + (parent.width() - self.width()) // 2, top.y() + 60)
        self.show()
        self.filter.setFocus()
