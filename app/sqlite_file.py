"""Ember's SQLite files (history.db, documents.db): one way to connect, and one way to
recover from a damaged file without ever overwriting it."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path


def connect(path: Path) -> sqlite3.Connection:
    """A connection shared by threads (callers hold a lock), autocommit, rows by name, WAL."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode survives any crash or kill of the process (only a power loss can
    # cost the last transactions), at a fraction of FULL's fsyncs per streamed update.
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA foreign_keys=ON")
    return db


def open_or_set_aside(path: Path, open_db: Callable[[Path], sqlite3.Connection]
                      ) -> tuple[sqlite3.Connection, Path | None]:
    """`open_db(path)`, and the damaged file's new name if SQLite could not read it: then the
    file (and its -wal/-shm) is kept under another name and a new one started."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return open_db(path), None
    except sqlite3.DatabaseError:
        aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
        path.rename(aside)
        for extra in ("-wal", "-shm"):
            sidecar = path.with_name(path.name + extra)
            if sidecar.exists():
                sidecar.rename(aside.with_name(aside.name + extra))
        return open_db(path), aside
