"""What a window started from a file manager leaves behind when it cannot start or dies:
there is no terminal to read, so the evidence goes into files in the data folder.

- `write_crash_log`: a Python exception during start-up becomes
  `DATA/logs/crash-<timestamp>.log` (traceback, Ember's version, platform, Python, frozen or
  not). When the data folder itself is what failed (unwritable, not a folder), the report
  goes to the temporary folder instead, so there is always one to point at.
- `NativeCrashLog`: faulthandler writes a native crash (a segfault in Qt or a driver) of the
  window process, with every thread's Python stack, to `DATA/logs/native-<timestamp>-<pid>.log`.
  The file is removed at a clean exit when empty, so only crashes leave one; a start removes
  the empty files of earlier processes that were killed (SIGKILL runs no exit code).

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
        path = folder / f"crash-{stamp}.log" if folder == home.logs else \
            folder / f"ember-crash-{stamp}-{os.getpid()}.log"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError:
            continue
        return path
    raise OSError("no folder could take the crash report") from error


class NativeCrashLog:
    """faulthandler into a file of this process's own in DATA/logs; `close` restores what
    faulthandler did before (stderr for pytest, say) and drops the file if nothing crashed."""

    def __init__(self, home: Paths) -> None:
        self.path: Path | None = None
        self._file: TextIO | None = None
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
        self.header_bytes = self._file.tell()
        self.path = path
        faulthandler.enable(file=self._file, all_threads=True)

    def close(self) -> None:
        if self._file is None or self.path is None:
            return
        faulthandler.disable()
        if self._was_enabled:
            faulthandler.enable(file=sys.__stderr__ or sys.stderr, all_threads=True)
        crashed = self._file.tell() > self.header_bytes
        self._file.close()
        self._file = None
        if not crashed:
            self.path.unlink(missing_ok=True)


def remove_stale(home: Paths) -> None:
    """Drop the header-only native logs of processes that are gone (killed, never crashed)."""
    if not home.logs.is_dir():
        return
    for path in home.logs.glob("native-*-*.log"):
        with contextlib.suppress(ValueError, OSError):
            pid = int(path.stem.rsplit("-", 1)[1])
            if pid != os.getpid() and not psutil.pid_exists(pid) and \
                    "Fatal Python error" not in path.read_text(encoding="utf-8", errors="replace"):
                path.unlink()
