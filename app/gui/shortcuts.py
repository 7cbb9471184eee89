"""Every keyboard shortcut of the window, in one table: the window binds these keys and the
shortcut list (F1, or Keys in the rail) shows the same table, so the two cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

from app.gui.nav_rail import PAGES, SETTINGS


@dataclass(frozen=True)
class Shortcut:
    keys: str  # QKeySequence text
    what: str


MODEL_SWITCHER = Shortcut("Ctrl+K", "Switch model: type to filter, Enter picks")
NEW_CHAT = Shortcut("Ctrl+N", "New chat")
FIND = Shortcut("Ctrl+F", "Find in this conversation (Enter: next, Shift+Enter: previous)")
EXPORT = Shortcut("Ctrl+E", "Export this conversation, or all")
IMPORT = Shortcut("Ctrl+O", "Import conversations from a JSON export")
HELP = Shortcut("F1", "This list")
PAGE_KEYS = tuple(Shortcut(item.shortcut, f"Show {item.label}") for item in PAGES)
OPEN_SETTINGS = Shortcut(SETTINGS.shortcut, "Settings")

# shown, not bound by the window (the composer and the find bar handle them)
TYPED = (Shortcut("Enter", "Send (in the message box)"),
         Shortcut("Shift+Enter", "New line (in the message box)"),
         Shortcut("Esc", "Stop the answer; close the find bar"))

BOUND = (MODEL_SWITCHER, NEW_CHAT, FIND, EXPORT, IMPORT, *PAGE_KEYS, OPEN_SETTINGS, HELP)
ALL = (*BOUND, *TYPED)


def is_window_key(event: QKeyEvent) -> bool:
    """A key press the window binds. Text boxes (the composer) let it through: on Linux desktops
    Qt's text boxes take Ctrl+K (delete to the end of the line) and Ctrl+E (end of line)."""
    pressed = QKeySequence(event.keyCombination()).toString()
    return any(QKeySequence(s.keys).toString() == pressed for s in BOUND)


def shortcuts_html() -> str:
    rows = "".join(f"<tr><td style='padding:3px 18px 3px 0'><b>{escape(s.keys)}</b></td>"
                   f"<td style='padding:3px 0'>{escape(s.what)}</td></tr>" for s in ALL)
    return f"<table>{rows}</table>"


class ShortcutsDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        layout = QVBoxLayout(self)
        self.table = QLabel(shortcuts_html())
        layout.addWidget(self.table)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
