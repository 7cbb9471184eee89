"""How much memory a worker process holds: its resident set (RSS), as the operating system
counts it. The server's /metrics and the window's status bar both show this number."""

from __future__ import annotations

import psutil  # type: ignore[import-untyped]  # (no py.typed)


def resident_bytes(pid: int | None) -> int:
    """The process's resident memory in bytes; 0 for no pid, or a process that is gone or
    cannot be read (a worker that just exited is not an error here)."""
    if pid is None:
        return 0
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return 0
