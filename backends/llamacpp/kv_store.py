"""Saved KV caches on disk: conversations that survive a restart.

When a model unloads, the engine writes each recent conversation's cells (llama.cpp's
per-sequence state, `llama_state_seq_get_data`) to a folder of the data folder; a later
load with the same model file and cache-shaping settings restores one into a slot when a
new prompt shares a long prefix with it (BatchEngine._from_disk). A file is written whole or
not at all (a temporary file renamed), carries its key, tokens and payload checksum, and is
dropped, with a log line, when any of them does not check out: never loaded.

File: MAGIC, then the header's length (u32, little-endian), the header (JSON: version, key,
tokens, payload length, payload sha256), then the payload, llama.cpp's bytes as it gave them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAGIC = b"EMBERKV\x00"
VERSION = 1
SUFFIX = ".kv"
DEFAULT_MAX_BYTES = 4 << 30  # the size setting's default: 4 GiB in all, every model's files
# A conversation shorter than this is not saved, nor a file restored for fewer more tokens
# than a slot already serves: evaluating 256 tokens takes about a second on 2 cores with the
# 0.5B, reading its 3 MB of cells milliseconds, but every restore also costs a file read and
# a checksum over the whole payload.
MIN_TOKENS = 256
_LENGTH = struct.Struct("<I")


@dataclass(frozen=True)
class StoreKey:
    """What a saved cache depends on: the model file, and the load settings that change its
    cells or their layout (a cache saved under other settings is not restored)."""
    model_sha256: str
    context: int  # cells per sequence
    kv_cache: str  # "f16", "q8_0"
    gpu_layers: int  # where the cells live and which kernels computed them
    llama_version: str  # llama-cpp-python's version: the state format is llama.cpp's own

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Entry:
    """A saved cache, as its header says (its payload is checked when it is loaded)."""
    path: Path
    tokens: tuple[int, ...]
    payload_len: int
    payload_sha256: str
    data_at: int  # the payload's offset in the file


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def tokens_digest(tokens: Sequence[int]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()[:16]


class DamagedFile(ValueError):
    """A file that is not a whole saved cache of this key."""


def read_header(path: Path, key: StoreKey) -> Entry:
    """The header of `path`, checked: magic, version, key and lengths (DamagedFile if not)."""
    with path.open("rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise DamagedFile("not a saved KV cache (bad magic)")
        raw = f.read(_LENGTH.size)
        if len(raw) != _LENGTH.size:
            raise DamagedFile("truncated header")
        (length,) = _LENGTH.unpack(raw)
        body = f.read(length)
        if len(body) != length:
            raise DamagedFile("truncated header")
    try:
        header = json.loads(body)
        version, saved_key = header["version"], header["key"]
        tokens = tuple(int(t) for t in header["tokens"])
        payload_len, checksum = int(header["payload_len"]), str(header["payload_sha256"])
    except (ValueError, KeyError, TypeError) as e:
        raise DamagedFile(f"unreadable header ({e})") from e
    if version != VERSION:
        raise DamagedFile(f"format version {version}, not {VERSION}")
    if saved_key != asdict(key):
        raise DamagedFile(f"saved under other settings ({saved_key})")
    data_at = len(MAGIC) + _LENGTH.size + length
    if path.stat().st_size != data_at + payload_len:
        raise DamagedFile(f"{path.stat().st_size - data_at} payload bytes, the header says "
                          f"{payload_len}")
    return Entry(path, tokens, payload_len, checksum, data_at)


class KvStore:
    """One model's saved caches (those of `key`) in `folder`, which every model shares, and
    in which all files together stay under `max_bytes` (least recently used out first)."""

    def __init__(self, folder: Path, key: StoreKey, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.folder, self.key, self.max_bytes = folder, key, max_bytes
        self._entries: list[Entry] | None = None  # read on first use

    def entries(self) -> list[Entry]:
        """This key's saved caches, headers checked; a damaged file is dropped and logged."""
        if self._entries is None:
            self._entries = []
            for path in sorted(self.folder.glob(f"{self.key.digest()}-*{SUFFIX}")):
                try:
                    self._entries.append(read_header(path, self.key))
                except (DamagedFile, OSError) as e:
                    self._drop(path, str(e))
        return self._entries

    def best(self, prompt: Sequence[int]) -> tuple[Entry | None, int]:
        """The saved cache sharing the longest prefix with `prompt`, and that prefix's length
        (short of the prompt's last token, whose logits the answer needs)."""
        best, shared = None, 0
        for entry in self.entries():
            n = min(common_prefix(entry.tokens, prompt), len(prompt) - 1)
            if n > shared:
                best, shared = entry, n
        return best, shared

    def holds(self, tokens: Sequence[int]) -> Entry | None:
        return next((e for e in self.entries() if e.tokens == tuple(tokens)), None)

    def load(self, entry: Entry) -> bytearray | None:
        """The entry's payload, its checksum verified; None (the file dropped and logged)
        when it does not check out."""
        try:
            again = read_header(entry.path, self.key)
            if again != entry:
                raise DamagedFile("changed since it was read")
            data = bytearray(entry.payload_len)
            with entry.path.open("rb") as f:
                f.seek(entry.data_at)
                if f.readinto(data) != entry.payload_len:
                    raise DamagedFile("truncated payload")
            if hashlib.sha256(data).hexdigest() != entry.payload_sha256:
                raise DamagedFile("payload checksum mismatch")
            os.utime(entry.path)  # recently used: the last to go when the store is full
            return data
        except (DamagedFile, OSError) as e:
            self.drop(entry, str(e))
            return None

    def drop(self, entry: Entry, why: str) -> None:
        """Forget a saved cache that could not be used, and delete its file."""
        if self._entries is not None and entry in self._entries:
            self._entries.remove(entry)
        self._drop(entry.path, why)

    def _drop(self, path: Path, why: str) -> None:
        log.warning("dropped the saved KV cache %s: %s", path.name, why)
        path.unlink(missing_ok=True)

    def save(self, tokens: Sequence[int], payload: bytes | bytearray | memoryview) -> Entry:
        """Write a saved cache atomically (a temporary file, renamed), then trim the folder."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        view = memoryview(payload).cast("B")
        header = json.dumps({
            "version": VERSION, "key": asdict(self.key), "tokens": list(tokens),
            "payload_len": view.nbytes,
            "payload_sha256": hashlib.sha256(view).hexdigest()}).encode()
        path = self.folder / f"{self.key.digest()}-{tokens_digest(tokens)}{SUFFIX}"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with tmp.open("wb") as f:
                f.write(MAGIC + _LENGTH.pack(len(header)) + header)
                f.write(view)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        entry = read_header(path, self.key)
        kept = []
        for e in self.entries():
            if e.path == path:
                continue
            if e.tokens == entry.tokens[:len(e.tokens)]:
                # an earlier turn of the same conversation: the new file serves all of it
                e.path.unlink(missing_ok=True)
            else:
                kept.append(e)
        self._entries = [*kept, entry]
        self.trim()
        return entry

    def trim(self) -> None:
        """Delete the least recently used files (any model's) until all fit in max_bytes."""
        files = []
        for path in self.folder.glob(f"*{SUFFIX}"):
            try:
                stat = path.stat()
            except OSError:
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files, key=lambda f: f[0]):
            if total <= self.max_bytes:
                break
            log.info("removed the saved KV cache %s: the store is over %d bytes",
                     path.name, self.max_bytes)
            path.unlink(missing_ok=True)
            total -= size
            if self._entries is not None:
                self._entries = [e for e in self._entries if e.path != path]
