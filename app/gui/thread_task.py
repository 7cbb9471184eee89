"""The one way the window's background work reaches the window: a QObject whose `_run` runs
once on a daemon thread of its own and reports only through its Qt signals.

Why that is safe: the task is made on the UI thread, so it lives there, and a signal emitted
on its worker thread is queued to the UI thread's event loop (Qt compares the emitting thread
with the receiver's; PySide6 queues a lambda or plain function connected to the task's signal
the same way). The arguments are values the worker no longer touches: strings, numbers, and
frozen dataclasses or lists made for the emit (Signal(object) keeps a reference until the
slot has run). `_run` never calls a widget; tests and EMBER_CHECK_THREADS=1 runs check that
(app/gui/thread_guard.py).
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject


class ThreadTask(QObject):
    thread_name = "ember-gui-task"  # shown by py-spy and in thread dumps

    def __init__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            # made elsewhere, it would live on that thread and its signals would run their
            # slots there, on widgets, off the UI thread
            raise RuntimeError(f"{type(self).__name__} must be made on the UI thread")
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
