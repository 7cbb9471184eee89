"""One pull of a model at a time: a second process (the window and `ember pull`, two test
sessions sharing a test home) waits for the first instead of writing into the same work
folder, where two unpackings of one file once gave a file neither had downloaded.

An OS file lock (flock on POSIX, msvcrt on Windows) on `<work folder>.lock`, beside the work
folder rather than in it (a finished pull removes the folder), removed by its holder. The OS
releases it when the holder exits, even by a crash, so a stale lock cannot block a later
pull. Waiting polls, so that a cancel still stops a pull that waits.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from app.pull.progress import check_cancel

POLL_S = 0.2


def _try_lock(f: IO[bytes]) -> bool:
    if sys.platform == "win32":
        import msvcrt

        f.seek(0)  # msvcrt locks bytes from the file's position
        try:
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(f: IO[bytes]) -> None:
    if sys.platform == "win32":
        import msvcrt

        f.seek(0)
        msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def pull_lock(path: Path, cancel: threading.Event | None = None,
              on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the lock file `path` for the block; `on_wait` is called once if another pull
    holds it, then this one waits (a cancel raises Cancelled). The holder removes the file
    when done, so a finished pull leaves nothing behind; a waiter that then gets the lock of
    the removed file opens the path again (the usual check of the file's identity)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        f = path.open("a+b")
        try:
            while not _try_lock(f):
                if not waited and on_wait is not None:
                    on_wait()
                waited = True
                check_cancel(cancel)
                time.sleep(POLL_S)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
        except BaseException:
            f.close()
            raise
        if current is not None and os.path.samestat(os.fstat(f.fileno()), current):
            break
        f.close()  # the holder before us removed this file: lock the path's new one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # Windows cannot remove an open file: it stays
            path.unlink()
        _unlock(f)
        f.close()
