"""Ctrl+F: find in the shown conversation. Every match is highlighted in its message, the
current one in a stronger color and scrolled into view; Enter goes to the next match,
Shift+Enter to the previous, Esc closes the bar and clears the highlights. Matching ignores
case, like a browser's find."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QKeyEvent, QTextCursor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QScrollArea,
    QTextEdit,
    QToolButton,
)

ALL_MATCHES = "#f7e08a"  # a highlighter's yellow: dark text stays readable on it in both themes
CURRENT_MATCH = "#f5a25d"


@dataclass(frozen=True)
class Match:
    text: QTextEdit  # the message's text widget
    start: int
    end: int


def find_in(texts: list[QTextEdit], query: str) -> list[Match]:
    """Every occurrence of `query` in `texts`, in reading order."""
    found: list[Match] = []
    if not query:
        return found
    for text in texts:
        document = text.document()
        cursor = document.find(query, 0)  # no flags: any case
        while not cursor.isNull():
            found.append(Match(text, cursor.selectionStart(), cursor.selectionEnd()))
            cursor = document.find(query, cursor)
    return found


class FindField(QLineEdit):
    """Enter: next match; Shift+Enter: previous."""
    next_requested = Signal()
    previous_requested = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.previous_requested.emit()
            else:
                self.next_requested.emit()
            return
        super().keyPressEvent(event)


class FindBar(QFrame):
    def __init__(self, texts: Callable[[], list[QTextEdit]], scroll: QScrollArea) -> None:
        super().__init__()
        self.setObjectName("find-bar")
        self.texts, self.scroll = texts, scroll
        self.matches: list[Match] = []
        self.current = -1
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 4, 6, 4)
        self.field = FindField()
        self.field.setPlaceholderText("Find in this conversation")
        self.field.setClearButtonEnabled(True)
        row.addWidget(self.field, 1)
        self.count = QLabel()
        self.count.setObjectName("stats")
        self.count.setMinimumWidth(90)
        row.addWidget(self.count)
        self.previous_button = self._button("↑", "Previous match (Shift+Enter)", row)
        self.next_button = self._button("↓", "Next match (Enter)", row)
        self.close_button = self._button("✕", "Close (Esc)", row)
        self.field.textChanged.connect(self.search)
        self.field.next_requested.connect(self.next)
        self.field.previous_requested.connect(self.previous)
        self.next_button.clicked.connect(self.next)
        self.previous_button.clicked.connect(self.previous)
        self.close_button.clicked.connect(self.close_bar)
        self.hide()

    @staticmethod
    def _button(text: str, tip: str, row: QHBoxLayout) -> QToolButton:
        button = QToolButton()
        button.setText(text)
        button.setToolTip(tip)
        button.setAutoRaise(True)
        row.addWidget(button)
        return button

    def open_bar(self) -> None:
        self.show()
        self.field.setFocus()
        self.field.selectAll()
        self.search()

    def close_bar(self) -> None:
        self._paint(self.matches, -1, clear=True)
        self.matches, self.current = [], -1
        self.hide()

    def forget(self) -> None:
        """The shown messages changed (another conversation, a cut): the matches are stale."""
        self.matches, self.current = [], -1
        if self.isVisible():
            self.count.setText("")

    def search(self) -> None:
        query = self.field.text()
        self._paint(self.matches, -1, clear=True)
        self.matches = find_in(self.texts(), query)
        self.current = -1
        if self.matches:
            self.go(0)
        else:
            self.count.setText("no match" if query else "")

    def next(self) -> None:
        self._step(1)

    def previous(self) -> None:
        self._step(-1)

    def _step(self, step: int) -> None:
        if not self.matches:
            self.search()  # the messages changed since: search them again
            return
        self.go((self.current + step) % len(self.matches))

    def go(self, index: int) -> None:
        self.current = index
        self._paint(self.matches, index)
        self.count.setText(f"{index + 1} of {len(self.matches)}")
        match = self.matches[index]
        cursor = QTextCursor(match.text.document())
        cursor.setPosition(match.start)
        rect = match.text.cursorRect(cursor)
        inner = self.scroll.widget()
        point = match.text.viewport().mapTo(inner, rect.center())
        self.scroll.ensureVisible(point.x(), point.y(), 40, 80)

    @staticmethod
    def _paint(matches: list[Match], current: int, clear: bool = False) -> None:
        """Highlight `matches` (all of them; `current` stronger), or clear their widgets."""
        by_text: dict[int, tuple[QTextEdit, list[QTextEdit.ExtraSelection]]] = {}
        for i, match in enumerate(matches):
            _, selections = by_text.setdefault(id(match.text), (match.text, []))
            if clear:
                continue
            selection = QTextEdit.ExtraSelection()
            cursor = QTextCursor(match.text.document())
            cursor.setPosition(match.start)
            cursor.setPosition(match.end, QTextCursor.MoveMode.KeepAnchor)
            selection.cursor = cursor
            selection.format.setBackground(QColor(CURRENT_MATCH if i == current
                                                  else ALL_MATCHES))
            selection.format.setForeground(QColor("#1b1b1b"))
            selections.append(selection)
        for text, selections in by_text.values():
            text.setExtraSelections(selections)

