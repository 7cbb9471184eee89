"""history.db is never set aside for what is not damage (issue 37): a file locked by another
process, a full disk and a read-only file each give a clear error and keep the file in place
with every message in it; an answer another live process is still writing is not marked
interrupted; the data folder and its files are the user's alone (0700/0600)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import sqlite_file
from app.config import Paths, paths, update_config
from app.history import History
from app.mcp.config import save_mcp_text
from app.sqlite_file import SqliteFileError

ROOT = os.geteuid() == 0


def messages_of(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return [row[0] for row in db.execute("SELECT content FROM messages ORDER BY id")]


def a_chat(path: Path) -> tuple[History, int]:
    h = History(path)
    conv = h.create()
    for i in range(5):
        h.add_message(conv.id, "user", f"question {i}")
        h.add_message(conv.id, "assistant", f"answer {i}")
    return h, conv.id


@contextlib.contextmanager
def small_tmpfs(size: str) -> Iterator[Path | None]:
    """A real small file system (as root), else None."""
    if not ROOT:
        yield None
        return
    folder = Path(f"/tmp/ember-tmpfs-{os.getpid()}-{time.monotonic_ns()}")
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                   check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def test_a_locked_history_waits_then_says_so_and_keeps_every_message(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_file, "BUSY_TIMEOUT_S", 0.3)
    path = tmp_path / "history.db"
    h, conv = a_chat(path)
    before = messages_of(path)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")  # another process's long write
        with pytest.raises(SqliteFileError, match="locked by another process"):
            h.add_message(conv, "user", "lost?")
        with pytest.raises(SqliteFileError, match="locked by another process"):
            History(path)
        other.execute("ROLLBACK")
    assert path.exists() and not list(tmp_path.glob("*.damaged-*"))
    assert messages_of(path) == before
    h.add_message(conv, "user", "after the lock")  # works again once it is free
    assert messages_of(path) == [*before, "after the lock"]


def test_a_full_disk_says_so_and_keeps_the_file_and_every_message(tmp_path):
    with small_tmpfs("400k") as disk:
        path = (disk or tmp_path) / "history.db"
        h, conv = a_chat(path)
        before = messages_of(path)
        if disk is None:  # not root: SQLite's own page cap makes the same SQLITE_FULL
            h._db.execute("PRAGMA max_page_count=" + str(
                h._db.execute("PRAGMA page_count").fetchone()[0] + 1))
        with pytest.raises(SqliteFileError, match="is full"):
            for _ in range(100):
                h.add_message(conv, "user", os.urandom(64 << 10).hex())
        h.close()
        assert path.exists() and not list(path.parent.glob("*.damaged-*"))
        assert messages_of(path)[:len(before)] == before
        again = History(path)  # opens fine: the file was never damaged
        assert again.recovered_from is None
        again.close()


def test_a_read_only_history_says_so_and_is_left_as_it_is(tmp_path):
    with small_tmpfs("2m") as disk:
        path = (disk or tmp_path) / "history.db"
        h, conv = a_chat(path)
        h.close()
        before = messages_of(path)
        if disk is not None:
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        else:
            path.chmod(0o444)
            path.parent.chmod(0o555)
        try:
            with pytest.raises(SqliteFileError, match="cannot be written"):
                h = History(path)
                h.add_message(conv, "user", "lost?")
            assert path.exists() and not list(path.parent.glob("*.damaged-*"))
            assert messages_of(path) == before
        finally:
            if disk is None:
                path.parent.chmod(0o700)


def test_a_damaged_file_is_still_set_aside(tmp_path):
    path = tmp_path / "history.db"
    path.write_bytes(b"not a database at all " * 100)
    h = History(path)
    assert h.recovered_from is not None and h.recovered_from.exists()


WRITER = """
import sys, time
from pathlib import Path
from app.history import History
h = History(Path(sys.argv[1]))
conv = h.create()
answer = h.add_message(conv.id, "assistant", "", status="streaming")
h.update_message(answer.id, "still writing")
print("streaming", flush=True)
time.sleep(120)
"""


def test_another_live_process_answer_is_not_marked_interrupted_until_it_dies(tmp_path):
    path = tmp_path / "history.db"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "streaming\n"
        reader = History(path)
        assert reader.interrupted_on_open == 0
        conv = reader.conversations()[0].id
        assert reader.messages(conv)[-1].status == "streaming"
        reader.close()
    finally:
        writer.kill()
        writer.wait()
    again = History(path)
    assert again.interrupted_on_open == 1
    assert again.messages(conv)[-1].status == "interrupted"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(os.name == "nt", reason="POSIX modes")
def test_the_data_folder_and_its_files_are_the_users_alone(tmp_path, monkeypatch):
    home = tmp_path / "ember"
    monkeypatch.setenv("EMBER_HOME", str(home))
    old = os.umask(0o022)
    try:
        p = paths()
        History(p.history_db).close()
        update_config(lambda doc: doc.update({"theme": "dark"}), p)
        save_mcp_text(p.mcp_file, '{"mcpServers": {}}')
        assert mode(home) == 0o700
        for f in [p.history_db, p.config_file, p.mcp_file]:
            assert mode(f) == 0o600, f
        # a folder and files an older Ember left readable by all are tightened on open
        home.chmod(0o755)
        p.history_db.chmod(0o644)
        History(Paths(home=paths().home).history_db).close()
        assert mode(home) == 0o700 and mode(p.history_db) == 0o600
    finally:
        os.umask(old)
