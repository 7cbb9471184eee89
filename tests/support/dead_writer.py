"""What a crashed Ember leaves in history.db: answers still "streaming" whose writing process
is gone. The rows are made by this (live) test process, then handed to a process that has
really run and exited, so the next open sees what it would after a crash."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil  # type: ignore[import-untyped]


def as_if_its_writer_died(db: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    pid = gone.pid
    gone.wait()
    assert not psutil.pid_exists(pid)
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE stream_writers SET pid=?", (pid,))
