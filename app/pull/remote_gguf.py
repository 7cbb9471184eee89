"""A GGUF file's header on the Hub, read without its weights: HTTP Range requests for growing
chunks from the file's start, parsed by app.gguf_file's own reader, stopping once the tensor
table is read. A 5 GB file costs a few MB (the vocabulary is most of a header).

The server is a stranger's: every length is checked against the listed file size by the
parser, a header may not pass MAX_HEADER_BYTES (a few MB in real files), and a server that
ignores Range (200 with the whole body) is read only up to what was asked for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from app.gguf_file import GGUFInfo, parse_gguf
from app.pull import hf_hub
from backends.errors import ModelFileError

FIRST_CHUNK = 256 << 10
MAX_HEADER_BYTES = 64 << 20  # the largest real headers (256k-token vocabularies) are ~10 MB


class RangeFile:
    """The start of a remote file as a seekable read-only file: bytes come in Range requests
    of at least double the previous size, and are kept (a header is read front to back)."""

    def __init__(self, url: str, size: int, label: str) -> None:
        self.url, self.size, self.label = url, size, label
        self.buffer = bytearray()
        self.pos = 0
        self.requests = 0

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1, /) -> bytes:
        end = self.size if n < 0 else min(self.pos + n, self.size)
        if end > len(self.buffer):
            self._fetch(end)
        data = bytes(self.buffer[self.pos:end])
        self.pos += len(data)
        return data

    def _fetch(self, end: int) -> None:
        if end > MAX_HEADER_BYTES:
            raise ModelFileError(f"{self.label}: the GGUF header runs past "
                                 f"{MAX_HEADER_BYTES >> 20} MiB (real headers are a few MB); "
                                 "not read further")
        have = len(self.buffer)
        want = min(max(end, have * 2, FIRST_CHUNK), self.size, MAX_HEADER_BYTES)
        self.buffer += _get_range(self.url, have, want, self.label)
        self.requests += 1
        if len(self.buffer) < end:
            raise ModelFileError(f"{self.label}: the server sent {len(self.buffer):,} bytes "
                                 f"where {end:,} were asked for")


def _get_range(url: str, start: int, end: int, label: str) -> bytes:
    """Bytes [start, end) of `url`; at most that many even from a server ignoring Range."""
    import httpx2
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    headers = build_hf_headers(token=hf_hub._token())
    headers["Accept-Encoding"] = "identity"
    headers["Range"] = f"bytes={start}-{end - 1}"
    try:
        with get_session().stream("GET", url, headers=headers, follow_redirects=True,
                                  timeout=30) as response:
            hf_raise_for_status(response)
            skip = start if response.status_code == 200 else 0  # Range ignored: whole body
            out = bytearray()
            for chunk in response.iter_bytes(1 << 16):
                out += chunk
                if len(out) >= skip + end - start:
                    break
            return bytes(out[skip:skip + end - start])
    except httpx2.TransportError as e:
        raise hf_hub.HubUnreachableError(f"reading the header of {label}: {e}") from e


@dataclass(frozen=True)
class RemoteHeader:
    info: GGUFInfo
    bytes_read: int
    requests: int


def read_remote_gguf(repo: str, filename: str, size: int, revision: str | None = None,
                     split_part: bool = False) -> RemoteHeader:
    """The parsed header of `repo`/`filename` (listed as `size` bytes) on the Hub; a
    `split_part` is a later part of a split GGUF (no metadata of its own)."""
    from huggingface_hub import hf_hub_url

    label = f"hf.co/{repo}/{filename}"
    if size <= 0:
        raise ModelFileError(f"{label}: the Hub lists it as {size} bytes")
    url = hf_hub_url(repo, filename, revision=revision, endpoint=hf_hub._endpoint())
    f = RangeFile(url, size, label)
    with hf_hub.hub_errors(repo, label):
        info = parse_gguf(f, size, Path(PurePosixPath(filename).name), label=label,
                          split_part=split_part)
    return RemoteHeader(info, len(f.buffer), f.requests)
