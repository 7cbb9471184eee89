"""The tray icon (the menu bar's on macOS): the window's API server, its state and address;
the loaded models, each with its memory and an Unload; Open Ember, Start or Stop server,
Quit. Made by the window only where the desktop has a tray
(`QSystemTrayIcon.isSystemTrayAvailable()`); without one, nothing changes.

The loaded models are what the window's status line finds every two seconds
(app.gui.status_line), off the UI thread: a model the API server loads appears too, and a
Runtime that is a running Ember service (an HTTP call) never holds up the menu. The menu is
rebuilt when they change and as it opens (aboutToShow). What an action does is the
window's to decide: the icon only asks, by signal.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QAction, QIcon
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.gui.status_line import LoadedNow, memory_text
from app.identity import APP_NAME


@dataclass(frozen=True)
class ServerState:
    """The window's API server as the tray shows it: `text` is its state in words
    ("stopped", "starting…", "stopped: why"), `url` its address once it listens. `service`:
    the window joined the Ember service, whose API serves (`ember service` starts and stops
    it, not the tray)."""
    running: bool = False
    text: str = "stopped"
    url: str = ""
    service: bool = False

    def line(self) -> str:
        if self.service:
            return f"Server: the Ember service at {self.url}"
        return f"Server: running at {self.url}" if self.url else f"Server: {self.text}"


def model_line(lm: LoadedNow) -> str:
    """A loaded model and the memory its load plan holds (the fit model's LoadPlan.memory_bytes,
    the number the Runtime budgets memory with)."""
    return f"{lm.ref} ({memory_text(lm.planned_bytes)}, {lm.backend})"


def tooltip(server: ServerState, loaded: list[LoadedNow]) -> str:
    models = "\n".join(model_line(lm) for lm in loaded) or "No model loaded"
    return f"{APP_NAME}\n{server.line()}\n{models}"


class TrayIcon(QSystemTrayIcon):
    open_requested = Signal()
    server_toggle_requested = Signal()
    unload_requested = Signal(str)  # a model's ref
    quit_requested = Signal()

    def __init__(self, icon: QIcon, parent: QObject | None = None) -> None:
        super().__init__(icon, parent)
        self.server = ServerState()
        self.loaded: list[LoadedNow] = []
        self.model_menus: list[QMenu] = []
        self.menu = QMenu()  # no parent: a context menu must outlive no window of ours
        self.menu.aboutToShow.connect(self.refresh)
        self.setContextMenu(self.menu)
        self.activated.connect(self._activated)
        self.refresh()

    def show_server(self, state: ServerState) -> None:
        self.server = state
        self.refresh()

    def models_seen(self, loaded: list[LoadedNow]) -> None:
        """What the status line's last probe found loaded: rebuild when it changed."""
        loaded = sorted(loaded, key=lambda lm: lm.ref)
        shown = [(lm.ref, lm.backend, lm.planned_bytes) for lm in self.loaded]
        if [(lm.ref, lm.backend, lm.planned_bytes) for lm in loaded] != shown:
            self.loaded = loaded
            self.refresh()

    def refresh(self) -> None:
        loaded = self.loaded
        self.setToolTip(tooltip(self.server, loaded))
        menu = self.menu
        menu.clear()  # deletes the actions; the submenus are QObjects of their own
        for old in self.model_menus:
            old.deleteLater()
        self.model_menus = []
        self._label(self.server.line())
        menu.addSeparator()
        if not loaded:
            self._label("No model loaded")
        for lm in loaded:
            models = menu.addMenu(model_line(lm))
            self.model_menus.append(models)
            unload = models.addAction("Unload")
            unload.triggered.connect(lambda _=False, ref=lm.ref: self._unload(ref))
        menu.addSeparator()
        menu.addAction(f"Open {APP_NAME}").triggered.connect(self.open_requested)
        if not self.server.service:
            toggle = menu.addAction("Stop server" if self.server.running else "Start server")
            toggle.triggered.connect(self.server_toggle_requested)
        menu.addSeparator()
        menu.addAction("Quit").triggered.connect(self.quit_requested)

    def _label(self, text: str) -> QAction:
        action = self.menu.addAction(text)
        action.setEnabled(False)
        return action

    def _unload(self, ref: str) -> None:
        # after the menu's own signal returns: the unload rebuilds the menu, and a QMenu
        # deleted inside its own triggered() crashes
        QTimer.singleShot(0, lambda: self.unload_requested.emit(ref))

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        # a left click (Trigger) or a double click opens the window; the right click is the
        # menu's, which Qt opens by itself. On macOS a click opens the menu: Trigger is that.
        opens = [QSystemTrayIcon.ActivationReason.DoubleClick]
        if sys.platform != "darwin":
            opens.append(QSystemTrayIcon.ActivationReason.Trigger)
        if reason in opens:
            self.open_requested.emit()
