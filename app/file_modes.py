"""Ember's data is the user's alone: the data folder 0700, its databases, keys and settings
0600, made so at creation and tightened when an older Ember (or a umask) left them looser.
A no-op on Windows, whose user profile folders are private already."""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def _tighten(path: Path, mode: int) -> None:
    if os.name == "nt":
        return
    try:
        current = stat.S_IMODE(path.stat().st_mode)
        if current & ~mode:
            os.chmod(path, current & mode)
    except OSError:
        pass  # a folder we cannot change (read-only disk): what uses it says why it fails


def private_dir(path: Path) -> Path:
    """`path` made (with its parents) and tightened to 0700."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    except OSError:
        return path  # its user (a database, a file write) reports why
    _tighten(path, PRIVATE_DIR)
    return path


def private_file(path: Path, create: bool = True) -> None:
    """`path` created empty if missing (unless `create` is False) with mode 0600, or
    tightened to it. Failures are left to whoever opens the file, who can say why."""
    if not path.exists():
        if not create:
            return
        try:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE))
        except OSError:
            return
    _tighten(path, PRIVATE_FILE)
