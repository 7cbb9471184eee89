"""Where a running Ember service listens, and the key it answers to.

The contract between `ember service` (which writes these files) and the front ends that join
it (app.runtime.choose): the key is `<data>/service/api-key` (0600, one line); a running
service writes `<data>/service/endpoint.json` = {"url": "http://127.0.0.1:PORT", "pid": N,
"started_at": t}. Both are plain files in the data folder, so any front end of the same user
finds them, and no other user can read the key.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from app.config import Paths
from app.file_modes import PRIVATE_FILE, private_dir


@dataclass(frozen=True)
class Endpoint:
    url: str  # http://127.0.0.1:PORT, no trailing slash
    pid: int
    started_at: float


def service_dir(paths: Paths) -> Path:
    return paths.home / "service"


def endpoint_file(paths: Paths) -> Path:
    return service_dir(paths) / "endpoint.json"


def key_file(paths: Paths) -> Path:
    return service_dir(paths) / "api-key"


def read_endpoint(paths: Paths) -> Endpoint | None:
    """The endpoint a service wrote, or None: no file, or one that is not the contract's
    shape (a half-written or hand-edited file is no service to join)."""
    try:
        data = json.loads(endpoint_file(paths).read_text(encoding="utf-8"))
        return Endpoint(str(data["url"]).rstrip("/"), int(data["pid"]),
                        float(data["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_endpoint(paths: Paths, url: str, pid: int) -> Endpoint:
    """Record where the service listens, atomically (a reader never sees half a file)."""
    endpoint = Endpoint(url.rstrip("/"), pid, time.time())
    target = endpoint_file(paths)
    private_dir(target.parent)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"url": endpoint.url, "pid": endpoint.pid,
                               "started_at": endpoint.started_at}), encoding="utf-8")
    os.replace(tmp, target)
    return endpoint


def write_key(paths: Paths, key: str) -> None:
    """The service's key, one line, 0600 from the moment it exists."""
    target = key_file(paths)
    private_dir(target.parent)
    fd = os.open(target, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key.strip() + "\n")


def service_key(paths: Paths) -> str | None:
    """The key in the data folder, or None when there is none (or it is empty)."""
    try:
        key = key_file(paths).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return key or None
