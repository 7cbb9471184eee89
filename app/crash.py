"""What a window started from a file manager leaves behind when it cannot start or dies:
there is no terminal to read, so the evidence goes into files in the data folder.

- `write_crash_log`: a Python exception during start-up becomes
  `DATA/logs/crash-<timestamp>.log` (traceback, Ember's version, platform, Python, frozen or
  not). When the data folder itself is what failed (unwritable, not a folder), the report
  goes to the temporary folder instead, so there is always one to point at.
- `NativeCrashLog`: faulthandler writes a native crash (a segfault in Qt or a driver) of the
  window process, with every thread's Python stack, to `DATA/logs/native-<timestamp>-<pid>.log`.
  Python's own fatal errors ("Fatal Python error: bool_dealloc", a C extension's reference
  bug) switch faulthandler off and write to file descriptor 2 instead, so when that is not a
  terminal (a double-click, a desktop menu, a test) it goes to the same file (and with it
  what the window's engine workers, which inherit it, write there: an engine's own fatal
  error is kept too, not lost). The file is
  removed at a clean exit unless it holds a crash, so only crashes leave one; a start removes
  the crash-free files of earlier processes that were killed (SIGKILL runs no exit code).

Only files named here are written: history.db and config.toml are never touched. A report
carries names, versions and a traceback, never a prompt or an answer.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TextIO

import psutil  # type: ignore[import-untyped]  # (no py.typed; only pid_exists here)

from app import __version__
from app.config import Paths


def frozen() -> bool:
    """True in a PyInstaller (or similar) bundle."""
    return bool(getattr(sys, "frozen", False))


def describe_process() -> list[str]:
    return [f"Ember {__version__}",
            f"platform: {platform.platform()} ({platform.machine()})",
            f"python: {sys.version.split()[0]} ({sys.executable})",
            f"frozen: {'yes' if frozen() else 'no'}"]


def write_crash_log(error: BaseException, home: Paths, when: str = "start-up") -> Path:
    """Write the report of `error` and return where it is: DATA/logs, or the temporary folder
    when the data folder cannot take it."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    text = "\n".join([f"Ember failed during {when} at {time.strftime('%Y-%m-%d %H:%M:%S %z')}",
                      *describe_process(), f"data folder: {home.home}", "",
                      "".join(traceback.format_exception(error))])
    for folder in (home.logs, Path(tempfile.gettempdir())):
        name = f"crash-{stamp}" if folder == home.logs else f"ember-crash-{stamp}-{os.getpid()}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = _new_file(folder, name)
            path.write_text(text, encoding="utf-8")
        except OSError:
            continue
        return path
    raise OSError("no folder could take the crash report") from error


def _new_file(folder: Path, name: str) -> Path:
    """`folder/name.log`, or `name-2.log`... when a report of the same second is there: a
    second crash must not overwrite the first one's report."""
    for n in range(1, 1000):
        path = folder / (f"{name}.log" if n == 1 else f"{name}-{n}.log")
        try:
            path.touch(exist_ok=False)
        except FileExistsError:
            continue
        return path
    raise OSError(f"{folder} holds 999 crash reports of the same second")


CRASH_MARK = "Fatal Python error"  # how both faulthandler and Python's fatal errors begin


class NativeCrashLog:
    """faulthandler (and, without a terminal, file descriptor 2) into a file of this
    process's own in DATA/logs; `close` restores what was there before (stderr for pytest,
    say) and drops the file if nothing crashed."""

    def __init__(self, home: Paths) -> None:
        self.path: Path | None = None
        self._file: TextIO | None = None
        self._stderr_fd: int | None = None  # the descriptor 2 to restore, when redirected
        self._was_enabled = faulthandler.is_enabled()
        remove_stale(home)
        path = home.logs / f"native-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        try:
            home.logs.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 (open until close)
        except OSError:
            return  # no data folder: write_crash_log reports start-up failures elsewhere
        self._file.write("\n".join([*describe_process(), f"pid: {os.getpid()}", "", ""]))
        self._file.flush()
        self.path = path
        faulthandler.enable(file=self._file, all_threads=True)
        if not _is_terminal(2):
            sys.stderr.flush()
            self._stderr_fd = os.dup(2)
            os.dup2(self._file.fileno(), 2)

    def close(self) -> None:
        if self._file is None or self.path is None:
            return
        faulthandler.disable()
        if self._stderr_fd is not None:
            sys.stderr.flush()
            os.dup2(self._stderr_fd, 2)
            os.close(self._stderr_fd)
            self._stderr_fd = None
        if self._was_enabled:
            faulthandler.enable(file=sys.__stderr__ or sys.stderr, all_threads=True)
        self._file.close()
        self._file = None
        if CRASH_MARK not in self.path.read_text(encoding="utf-8", errors="replace"):
            self.path.unlink(missing_ok=True)


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def remove_stale(home: Paths) -> None:
    """Drop the crash-free native logs of processes that are gone (killed, never crashed)."""
    if not home.logs.is_dir():
        return
    for path in home.logs.glob("native-*-*.log"):
        with contextlib.suppress(ValueError, OSError):
            pid = int(path.stem.rsplit("-", 1)[1])
            if pid != os.getpid() and not psutil.pid_exists(pid) and \
                    CRASH_MARK not in path.read_text(encoding="utf-8", errors="replace"):
                path.unlink()
