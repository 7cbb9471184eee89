"""The chat's Tools button: a menu of the MCP servers in mcp.json, each switched on or off for
this conversation (the model sees the tools of the servers that are on)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QToolButton


class ToolsButton(QToolButton):
    toggled_servers = Signal(tuple)  # the names of the servers now on
    opening = Signal()  # the menu is about to show: the list is read again from mcp.json

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("tools")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.menu_.aboutToShow.connect(self.opening)
        self.setMenu(self.menu_)
        self.actions_by_server: dict[str, QAction] = {}
        self.set_servers([], set())

    def set_servers(self, names: list[str], on: set[str], error: str = "") -> None:
        self.menu_.clear()
        self.actions_by_server = {}
        for name in names:
            action = self.menu_.addAction(name)
            action.setCheckable(True)
            action.setChecked(name in on)
            action.toggled.connect(self._toggled)
            self.actions_by_server[name] = action
        if error or not names:
            note = self.menu_.addAction(error or "No MCP servers yet: add them in Settings "
                                        "(mcp.json)")
            note.setEnabled(False)
        count = sum(name in on for name in names)
        self.setText(f"Tools: {count} on" if count else "Tools: off")
        self.setToolTip(error or "The MCP servers whose tools the model may call in this chat; "
                        "each call waits for your approval")

    def on(self) -> tuple[str, ...]:
        return tuple(n for n, a in self.actions_by_server.items() if a.isChecked())

    def _toggled(self) -> None:
        on = self.on()
        self.setText(f"Tools: {len(on)} on" if on else "Tools: off")
        self.toggled_servers.emit(on)
