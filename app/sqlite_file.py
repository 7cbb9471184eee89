"""Ember's SQLite files (history.db, documents.db): one way to connect, one way to recover
from a damaged file without ever overwriting it, and one clear error for a file that is busy,
full or read-only (which is not damage: the file stays where it is, every row in it)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from app.file_modes import private_dir, private_file
from backends.errors import EmberError

BUSY_TIMEOUT_S = 10.0  # how long a write waits for another process's transaction
DAMAGED = ("SQLITE_NOTADB", "SQLITE_CORRUPT")


class SqliteFileError(EmberError, sqlite3.OperationalError):
    """A database file that cannot be written or read now (busy, full, read-only), named
    with what to do; still a sqlite3.OperationalError for code that handles those."""


def is_damaged(error: sqlite3.Error) -> bool:
    name = getattr(error, "sqlite_errorname", "")
    text = str(error)
    return name.startswith(DAMAGED) or "file is not a database" in text \
        or "malformed" in text


def explain(error: sqlite3.Error, path: Path | str) -> str | None:
    """One line for a file that is busy, full or read-only; None for any other failure."""
    name = getattr(error, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(error):
        return (f"{path} is locked by another process (another Ember window, `ember chat`, "
                f"or a backup tool) and stayed locked for {BUSY_TIMEOUT_S:g} s: close it and "
                "try again; nothing was lost")
    if name.startswith("SQLITE_FULL") or "disk is full" in str(error):
        return (f"the disk holding {path} is full: free some space; what was saved before "
                "is intact, the last change was not saved")
    if name.startswith(("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_CANTOPEN")) \
            or "readonly" in str(error):
        return (f"{path} cannot be written (read-only file or folder, or no permission): "
                "check its permissions; it was left as it is")
    return None


@contextlib.contextmanager
def _explaining(path: Path | str) -> Iterator[None]:
    """A busy, full or read-only failure inside as a SqliteFileError; others as they are."""
    try:
        yield
    except sqlite3.OperationalError as e:
        message = None if isinstance(e, SqliteFileError) else explain(e, path)
        if message is None:
            raise
        raise SqliteFileError(message) from e


class _ExplainingConnection(sqlite3.Connection):
    """Every statement's busy, full or read-only failure as a SqliteFileError."""

    path: Path | str = ""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        with _explaining(self.path):
            return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        with _explaining(self.path):
            return super().executemany(sql, parameters)

    def executescript(self, script: str, /) -> sqlite3.Cursor:
        with _explaining(self.path):
            return super().executescript(script)


def connect(path: Path) -> sqlite3.Connection:
    """A connection shared by threads (callers hold a lock), autocommit, rows by name, WAL;
    the file private to the user (0600, and its -wal/-shm)."""
    private_dir(path.parent)
    private_file(path)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                         timeout=BUSY_TIMEOUT_S, factory=_ExplainingConnection)
    db.path = path
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode survives any crash or kill of the process (only a power loss can
    # cost the last transactions), at a fraction of FULL's fsyncs per streamed update.
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA foreign_keys=ON")
    for sidecar in ("-wal", "-shm"):
        private_file(path.with_name(path.name + sidecar), create=False)
    return db


def open_or_set_aside(path: Path, open_db: Callable[[Path], sqlite3.Connection]
                      ) -> tuple[sqlite3.Connection, Path | None]:
    """`open_db(path)`, and the damaged file's new name if SQLite could not read it: then the
    file (and its -wal/-shm) is kept under another name and a new one started. Only damage
    moves a file: busy, full or read-only is a SqliteFileError that says so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return open_db(path), None
    except sqlite3.DatabaseError as e:
        if not is_damaged(e):
            with _explaining(path):
                raise
        aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
        path.rename(aside)
        for extra in ("-wal", "-shm"):
            sidecar = path.with_name(path.name + extra)
            if sidecar.exists():
                sidecar.rename(aside.with_name(aside.name + extra))
        return open_db(path), aside
