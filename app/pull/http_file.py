"""One file over HTTP into a folder: streamed to `<name>.part`, continued with a Range request
after a dropped connection (in this pull, a few times, and in the next pull), checked against
its SHA-256, and renamed into place only when it matches."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from app.errors import ChecksumError, DownloadError
from app.pull.progress import check_cancel

RETRIES = 5
BytesFn = Callable[[int, str], None]  # (bytes of the file on disk so far, a message or "")


def redacted(url: str) -> str:
    """`url` for a message or the log: without the password an index URL may carry."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def _hash_of(part: Path) -> tuple[hashlib._Hash, int]:
    digest, size = hashlib.sha256(), 0
    if part.exists():
        with part.open("rb") as f:
            while block := f.read(1 << 22):
                digest.update(block)
                size += len(block)
    return digest, size


def _continued_from(response: httpx.Response, have: int) -> int:
    """Where the body starts: `have` when the server honoured the Range, 0 when it sent the
    whole file (a server without Range support answers 200)."""
    if response.status_code != 206:
        return 0
    unit, _, spec = response.headers.get("content-range", "").partition(" ")
    start = spec.split("-", 1)[0]
    if unit != "bytes" or not start.isdigit() or int(start) != have:
        raise DownloadError(f"the server answered a request for bytes {have}- with "
                            f"{response.headers.get('content-range')!r}")
    return have


def download(client: httpx.Client, url: str, dest: Path, sha256: str,
             on_bytes: BytesFn, cancel: threading.Event | None) -> Path:
    """`url` into `dest` (a file path), verified against `sha256`. `on_bytes(done, message)`
    gets the bytes of this file so far. A mismatch removes the partial file and raises
    ChecksumError; a cancel keeps it for the next call."""
    part = dest.with_name(dest.name + ".part")
    digest, have = _hash_of(part)
    if have:
        on_bytes(have, "resuming")
    for attempt in range(RETRIES + 1):
        check_cancel(cancel)
        headers = {"Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            with client.stream("GET", url, headers=headers) as response:
                if response.status_code == 416 and have:  # the .part is already whole
                    break
                if response.status_code not in (200, 206):
                    raise DownloadError(f"{redacted(url)}: HTTP {response.status_code}")
                start = _continued_from(response, have)
                if start == 0 and have:
                    digest, have = hashlib.sha256(), 0
                with part.open("ab" if start else "wb") as out:
                    # no chunk size: each read is written as it arrives, so what came
                    # before a dropped connection is on disk for the Range request
                    for chunk in response.iter_bytes():
                        check_cancel(cancel)
                        out.write(chunk)
                        digest.update(chunk)
                        have += len(chunk)
                        on_bytes(have, "")
            break
        except httpx.TransportError as e:
            if attempt == RETRIES:
                raise DownloadError(f"downloading {dest.name} kept failing ({type(e).__name__}: "
                                    f"{e}); run pull again to resume") from e
            on_bytes(have, f"connection lost ({type(e).__name__}); resuming")
            time.sleep(min(2**attempt * 0.25, 4))
    if digest.hexdigest() != sha256:
        got = digest.hexdigest()
        part.unlink(missing_ok=True)
        raise ChecksumError(f"checksum mismatch for {dest.name}: the index says {sha256}, the "
                            f"download is {got}; it was removed and nothing was installed")
    os.replace(part, dest)
    return dest
