"""The shape of the window's background work: a QObject whose `_run` runs once on a daemon
thread of its own and reports through Qt signals (queued to the UI thread's receivers)."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject


class ThreadTask(QObject):
    thread_name = "ember-gui-task"  # shown by py-spy and in thread dumps

    def __init__(self) -> None:
        super().__init__()
        self._thread = threading.Thread(target=self._run, daemon=True, name=self.thread_name)

    def start(self) -> None:
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the work is over (False: still running after `timeout` seconds)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        raise NotImplementedError
