"""The running service's files in `<data>/service/`: its API key and where it listens.

`api-key`: one line, 0600, made by `ember service install` (or the first start); the service's
`ember serve --service` requires it, and local front ends (the window, `ember service status`)
send it. `endpoint.json`: {"url", "pid", "started_at"}, written by the service's `ember serve`
once it listens and removed when it stops cleanly. A server killed outright leaves the file
behind, so a reader checks that its pid still runs.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from app.config import Paths
from app.file_modes import PRIVATE_FILE, private_dir


@dataclass(frozen=True)
class Endpoint:
    url: str  # http://127.0.0.1:PORT
    pid: int
    started_at: float  # unix time


def service_dir(paths: Paths) -> Path:
    return private_dir(paths.home / "service")


def key_file(paths: Paths) -> Path:
    return service_dir(paths) / "api-key"


def endpoint_file(paths: Paths) -> Path:
    return service_dir(paths) / "endpoint.json"


def service_key(paths: Paths) -> str | None:
    """The service's API key, or None when none was made (or the file is unreadable)."""
    try:
        key = key_file(paths).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return key or None


def ensure_service_key(paths: Paths) -> str:
    """The service's key, made now (32 random bytes, URL-safe) when there is none."""
    key = service_key(paths)
    if key is None:
        key = secrets.token_urlsafe(32)
        write_private(key_file(paths), key + "\n")
    return key


def write_key(paths: Paths, key: str) -> None:
    """The service's key, one line, 0600 (a test's or an install's own key)."""
    write_private(key_file(paths), key.strip() + "\n")


def write_endpoint(paths: Paths, url: str, pid: int | None = None,
                   started_at: float | None = None) -> Endpoint:
    """Announce a listening service; a reader never sees half a file (written, then renamed)."""
    endpoint = Endpoint(url=url.rstrip("/"), pid=os.getpid() if pid is None else pid,
                        started_at=time.time() if started_at is None else started_at)
    write_private(endpoint_file(paths), json.dumps(
        {"url": endpoint.url, "pid": endpoint.pid, "started_at": endpoint.started_at}) + "\n")
    return endpoint


def remove_endpoint(paths: Paths, pid: int | None = None) -> None:
    """Remove the announcement, only if it is `pid`'s (default: this process's): a server
    that stops late must not take down the one that replaced it."""
    current = _read(paths)
    if current is not None and current.pid == (os.getpid() if pid is None else pid):
        endpoint_file(paths).unlink(missing_ok=True)


def read_endpoint(paths: Paths) -> Endpoint | None:
    """Where the service listens, or None: no file, a damaged one, or its process is gone."""
    endpoint = _read(paths)
    if endpoint is None or not pid_alive(endpoint.pid):
        return None
    return endpoint


def pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _read(paths: Paths) -> Endpoint | None:
    try:
        raw = json.loads(endpoint_file(paths).read_text(encoding="utf-8"))
        return Endpoint(url=str(raw["url"]).rstrip("/"), pid=int(raw["pid"]),
                        started_at=float(raw["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_private(path: Path, text: str) -> None:
    """`text` into `path`, 0600, by rename: a reader sees the old file or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, PRIVATE_FILE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
