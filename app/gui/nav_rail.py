"""The left rail: one button per page (Chat, Models, Machine, Server) and Settings, each an
icon over its name, and the shortcut list at the bottom.

Settings is a button, not a page: it opens the Settings dialog, whose Save and Cancel decide
whether the edits count (see MainWindow.open_settings).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QButtonGroup, QFrame, QToolButton, QVBoxLayout

from app.gui.icons import themed_icon


@dataclass(frozen=True)
class RailItem:
    name: str  # the page's key, and its icon's file name (assets/icons/NAME.svg)
    label: str
    shortcut: str
    tip: str


PAGES = (
    RailItem("chat", "Chat", "Ctrl+1", "Your conversations"),
    RailItem("models", "Models", "Ctrl+2", "Every model in the registry, with its fit here, "
             "and the downloads"),
    RailItem("machine", "Machine", "Ctrl+3", "What this machine can run, and what suits it"),
    RailItem("server", "Server", "Ctrl+4", "The local OpenAI- and Ollama-compatible API server"),
)
SETTINGS = RailItem("settings", "Settings", "Ctrl+,", "Generation, backend, presets, "
                    "appearance, remote and MCP servers")
SHORTCUTS = RailItem("shortcuts", "Keys", "F1", "Keyboard shortcuts")


class NavRail(QFrame):
    page_requested = Signal(str)  # a PAGES name
    settings_requested = Signal()
    shortcuts_requested = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("rail")
        self.setFixedWidth(84)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 10, 6, 10)
        layout.setSpacing(4)
        self.group = QButtonGroup(self)
        self.group.setExclusive(True)
        self.buttons: dict[str, QToolButton] = {}
        for item in PAGES:
            button = self._button(item, checkable=True)
            button.clicked.connect(lambda _=False, n=item.name: self.page_requested.emit(n))
            self.group.addButton(button)
            layout.addWidget(button)
        layout.addStretch(1)
        for item, signal in ((SETTINGS, self.settings_requested),
                             (SHORTCUTS, self.shortcuts_requested)):
            button = self._button(item, checkable=False)
            button.clicked.connect(signal)
            layout.addWidget(button)

    def _button(self, item: RailItem, checkable: bool) -> QToolButton:
        button = QToolButton()
        button.setObjectName("rail-button")
        button.setText(item.label)
        button.setToolTip(f"{item.tip} ({item.shortcut})")
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextUnderIcon)
        button.setIconSize(QSize(24, 24))
        button.setCheckable(checkable)
        button.setAutoRaise(True)
        button.setFixedSize(72, 60)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.buttons[item.name] = button
        return button

    def set_current(self, name: str) -> None:
        """Mark the shown page (the page may change without a click: first run, a shortcut)."""
        button = self.buttons.get(name)
        if button is not None:
            button.setChecked(True)

    def current(self) -> str:
        checked = self.group.checkedButton()
        return next((n for n, b in self.buttons.items() if b is checked), "")

    def changeEvent(self, event: QEvent) -> None:
        # a theme applied after the window was built (app.gui.start) or changed in Settings
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.paint_icons()
        super().changeEvent(event)

    def paint_icons(self) -> None:
        """(Re)draw the icons in the palette's text color: at start and after a theme change."""
        color = QApplication.palette().color(QPalette.ColorRole.WindowText)
        for item in (*PAGES, SETTINGS, SHORTCUTS):
            self.buttons[item.name].setIcon(themed_icon(item.name, color))
