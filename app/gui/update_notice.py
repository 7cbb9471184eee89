"""The update check in the window: a background job at start (only when switched on) and a
non-modal notice in the status bar when a newer Ember is out (app.update_check)."""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel

from app.gui.thread_task import ThreadTask
from app.update_check import TIMEOUT_S, Release, newer_release


class UpdateCheckTask(ThreadTask):
    """Ask the feed once, off the UI thread; `found` only when a newer release is out."""
    thread_name = "ember-gui-update"
    found = Signal(object)  # app.update_check.Release
    done = Signal()

    def __init__(self, feed: str, timeout: float = TIMEOUT_S) -> None:
        super().__init__()
        self.feed, self.timeout = feed, timeout

    def _run(self) -> None:
        release = newer_release(self.feed, self.timeout)  # logs, never raises, a bad feed
        if release is not None:
            self.found.emit(release)
        self.done.emit()


class UpdateNotice(QLabel):
    """"Ember X.Y is available — release page", hidden until a check finds one."""

    def __init__(self) -> None:
        super().__init__()
        self.setOpenExternalLinks(True)
        self.setVisible(False)
        self.task: UpdateCheckTask | None = None
        self.release: Release | None = None

    def check(self, feed: str, timeout: float = TIMEOUT_S) -> UpdateCheckTask:
        self.task = UpdateCheckTask(feed, timeout)
        self.task.found.connect(self.show_release)
        self.task.start()
        return self.task

    def show_release(self, release: Release) -> None:
        self.release = release
        self.setText(f"Ember {html.escape(release.version)} is available — "
                     f'<a href="{html.escape(release.url, quote=True)}">release page</a>')
        if release.notes:
            self.setToolTip(release.notes[:2000])
        self.setVisible(True)
