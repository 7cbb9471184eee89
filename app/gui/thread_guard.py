"""The window's threads, kept honest: only the UI thread calls into Qt objects, and a thread
that dies says so.

The window's long work runs on `ThreadTask` threads that report through queued signals
(app/gui/thread_task.py). Qt gives no error when another thread calls a widget anyway: the
call races the UI thread and corrupts state or crashes later, far from its cause. So:

- `WindowThreadGuard` watches every thread started after `install()` (`threading.setprofile`)
  and records each call a worker thread makes into a method of a Qt object (a widget, a
  model, a task's own QObject). Emitting a signal is the one way out of a worker, and a
  signal instance is not a Qt object, so emits pass. The guard costs a Python-level check
  per call on worker threads, so it is on where it is asked for: `EMBER_CHECK_THREADS=1`
  (the test suite and its real-window sessions set it).
- `report_thread_crashes` turns an exception that ends a thread, or escapes a slot on the UI
  thread (PySide6 hands those to `sys.excepthook` and carries on), into a crash report in
  the data folder beside a line in the log, so no crash in the window goes unseen.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from app.config import Paths

log = logging.getLogger(__name__)
ENV = "EMBER_CHECK_THREADS"


class WindowThreadError(RuntimeError):
    """A thread other than the UI thread called into a Qt object."""


def checking_threads() -> bool:
    return os.environ.get(ENV, "").strip() not in ("", "0")


class WindowThreadGuard:
    def __init__(self, on_violation: Callable[[WindowThreadError], None] | None = None) -> None:
        from PySide6.QtCore import QObject

        self._qobject = QObject
        self._on_violation = on_violation
        self._seen: set[tuple[str, str, str]] = set()
        self.violations: list[WindowThreadError] = []

    def install(self) -> None:
        threading.setprofile(self._profile)

    def uninstall(self) -> None:
        threading.setprofile(None)  # None removes the hook

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "c_call":
            return
        owner = getattr(arg, "__self__", None)
        if not isinstance(owner, self._qobject):
            return
        thread = threading.current_thread()
        if thread is threading.main_thread():
            return
        key = (thread.name, type(owner).__name__, getattr(arg, "__name__", "?"))
        if key in self._seen:  # each offence once: a loop would otherwise flood the log
            return
        self._seen.add(key)
        stack = "".join(traceback.format_stack(frame))
        error = WindowThreadError(f"thread {key[0]!r} called {key[1]}.{key[2]}, a Qt object's "
                                  f"method, off the UI thread:\n{stack}")
        self.violations.append(error)
        log.error("%s", error)
        if self._on_violation is not None:
            self._on_violation(error)


def report_thread_crashes(home: Paths) -> Callable[[], None]:
    """Crash reports for exceptions that end a thread or escape a slot; returns the undo."""
    from app.crash import write_crash_log

    previous_thread_hook, previous_hook = threading.excepthook, sys.excepthook

    def report(error: BaseException, when: str) -> Path | None:
        log.error("uncaught exception in %s", when, exc_info=error)
        try:
            return write_crash_log(error, home, when=when)
        except OSError:
            return None

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
            name = args.thread.name if args.thread is not None else "a thread"
            report(args.exc_value, f"thread {name}")
        previous_thread_hook(args)

    def slot_hook(kind: type[BaseException], value: BaseException,
                  tb: TracebackType | None) -> None:
        report(value.with_traceback(tb), "the window (an exception in a Qt slot)")
        previous_hook(kind, value, tb)

    threading.excepthook, sys.excepthook = thread_hook, slot_hook

    def undo() -> None:
        threading.excepthook, sys.excepthook = previous_thread_hook, previous_hook
    return undo
