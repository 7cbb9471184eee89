"""Read and check a GGUF file's header and tensor table before a native library touches it.

`gguf.GGUFReader` parses every token string into numpy objects (20+ s for a 150k vocabulary:
docs/notes/gguf-file.md), so we walk the header ourselves with `struct`, using the `gguf` package's
constants for value types, quantization block sizes and architecture names. The walk checks
every length against the file size, so random bytes or a cut-off file give a clear error
instead of a crash or a multi-GB allocation.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import gguf

from backends.errors import ModelFileError

MAGIC = b"GGUF"
MAX_TENSORS = 1_000_000
MAX_KV = 100_000
MAX_KEPT_ITEMS = 4096  # items of an array Ember decodes (tags, languages)
# String arrays this long (vocabularies, merges) are remembered by length and SHA-256 once
# walked, so the next file with the same bytes skips them without the walk (skip_strings).
REMEMBERED_ARRAY = 10_000
_SKIPPED: dict[int, tuple[tuple[int, bytes], ...]] = {}  # item count -> (bytes, SHA-256)s
_U64 = struct.Struct("<Q")
KNOWN_ARCHITECTURES = frozenset(gguf.MODEL_ARCH_NAMES.values())
# String arrays we never need (tokens, merges): skipped, not decoded.
_KEEP_ARRAY_KEYS = frozenset({"general.tags", "general.languages"})

_SCALARS = {
    gguf.GGUFValueType.UINT8: "<B", gguf.GGUFValueType.INT8: "<b",
    gguf.GGUFValueType.UINT16: "<H", gguf.GGUFValueType.INT16: "<h",
    gguf.GGUFValueType.UINT32: "<I", gguf.GGUFValueType.INT32: "<i",
    gguf.GGUFValueType.FLOAT32: "<f", gguf.GGUFValueType.BOOL: "<?",
    gguf.GGUFValueType.UINT64: "<Q", gguf.GGUFValueType.INT64: "<q",
    gguf.GGUFValueType.FLOAT64: "<d",
}


@dataclass
class GGUFInfo:
    path: Path
    version: int
    architecture: str
    metadata: dict[str, object]
    tensor_count: int
    data_bytes: int
    file_size: int
    params: int  # total elements of all tensors
    tensor_types: dict[str, int] = field(default_factory=dict)  # quant type name -> count
    type_bytes: dict[str, int] = field(default_factory=dict)  # quant type name -> bytes
    embedding: tuple[str, int] = ("", 0)  # token_embd.weight: (quant type name, bytes)
    output: tuple[str, int] = ("", 0)  # output.weight, ("", 0) where tied to the embedding

    def arch_value(self, key: str, default: object = None) -> object:
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def arch_int(self, key: str, default: int) -> int:
        """A number of this architecture's metadata (`default` where the file has none)."""
        value = self.arch_value(key, default)
        if not isinstance(value, int | float):
            raise ModelFileError(f"{self.path}: {self.architecture}.{key} is {value!r}, "
                                 "not a number")
        return int(value)

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name") or self.path.stem)

    @property
    def chat_template(self) -> str | None:
        t = self.metadata.get("tokenizer.chat_template")
        return str(t) if t else None

    @property
    def context_length(self) -> int:
        return self.arch_int("context_length", 2048)

    @property
    def file_type(self) -> str:
        """llama.cpp's name for the file's quantization mix, e.g. 'Q4_K_M'."""
        ft = self.metadata.get("general.file_type")
        if not isinstance(ft, int):
            return "unknown"
        try:
            return gguf.LlamaFileType(ft).name.removeprefix("MOSTLY_")
        except ValueError:  # a type this gguf package does not know
            return "unknown"

    @property
    def kv_bytes_per_token(self) -> int:
        """f16 K and V for every layer; llama.cpp's default KV type. A NextN/MTP block is not
        cached; MLA (a deepseek2 file with key_length_mla) caches K only, its one head of
        key_length values (app.fit.offload.cell_values)."""
        layers = self.arch_int("block_count", 0) - self.arch_int("nextn_predict_layers", 0)
        heads = self.arch_int("attention.head_count", 1)
        kv_heads = self.arch_int("attention.head_count_kv", heads)
        embd = self.arch_int("embedding_length", 0)
        k_len = self.arch_int("attention.key_length", embd // max(heads, 1))
        v_len = self.arch_int("attention.value_length", k_len)
        if self.arch_int("attention.key_length_mla", 0):
            v_len = 0
        return layers * kv_heads * (k_len + v_len) * 2


class Readable(Protocol):
    """What the parser reads from: a local file, or app.pull.remote_gguf.RangeFile."""

    def read(self, n: int = -1, /) -> bytes: ...
    def seek(self, offset: int, whence: int = 0, /) -> int: ...
    def tell(self) -> int: ...


class _Cursor:
    def __init__(self, f: Readable, size: int, path: Path) -> None:
        self.f, self.size, self.path = f, size, path

    def fail(self, what: str) -> ModelFileError:
        return ModelFileError(f"{self.path}: {what}")

    def read(self, n: int) -> bytes:
        if n < 0 or self.f.tell() + n > self.size:
            raise self.fail(f"truncated GGUF: header needs bytes past the end of the file "
                            f"({self.size} bytes)")
        return self.f.read(n)

    def unpack(self, fmt: str) -> int | float | bool:
        value: int | float | bool = struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]
        return value

    def integer(self, fmt: str) -> int:
        """A length, a count, a type or a version: an unsigned integer format."""
        return int(self.unpack(fmt))

    def string(self) -> str:
        n = self.integer("<Q")
        return self.read(n).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        n = self.integer("<Q")
        if self.f.tell() + n > self.size:
            raise self.fail("truncated GGUF: a string runs past the end of the file")
        self.f.seek(n, os.SEEK_CUR)

    def skip_strings(self, count: int) -> None:
        """skip_string `count` times, walking the lengths in 64 KiB blocks: a vocabulary is
        150k+ strings, and one read per length costs a second per file through a remote
        reader (app.pull.remote_gguf). A long array whose bytes were walked before (the same
        tokenizer in every quantization of a repo) is recognised by its digest instead."""
        start = self.f.tell()
        for length, digest in _SKIPPED.get(count, ()):
            if start + length <= self.size:
                self.f.seek(start)
                if hashlib.sha256(self.f.read(length)).digest() == digest:
                    return
        unpack = _U64.unpack_from
        pos = start
        buf, base = b"", pos  # buf holds the file's bytes from `base`
        limit = pos - 8  # the last position whose length is in buf
        for _ in range(count):
            if pos > limit:
                buf, base = self._refill(buf, base, pos, 8)
                limit = base + len(buf) - 8
            pos += 8 + unpack(buf, pos - base)[0]
            if pos > self.size:
                raise self.fail("truncated GGUF: a string runs past the end of the file")
        if count >= REMEMBERED_ARRAY:
            self.f.seek(start)
            digest = hashlib.sha256(self.f.read(pos - start)).digest()
            if len(_SKIPPED) >= 32:
                _SKIPPED.clear()
            _SKIPPED[count] = (*_SKIPPED.get(count, ())[-3:], (pos - start, digest))
        self.f.seek(pos)

    def _refill(self, buf: bytes, base: int, pos: int, need: int) -> tuple[bytes, int]:
        """The bytes from `pos` on, at least `need` of them (the file is read from where
        `buf` ends, or from `pos` past it)."""
        end = base + len(buf)
        if pos >= end:
            self.f.seek(pos)
            buf, end = b"", pos
        else:
            buf = buf[pos - base:]
        more = self.f.read(max(need, 64 << 10))
        if len(buf) + len(more) < need:
            raise self.fail(f"truncated GGUF: header needs bytes past the end of the file "
                            f"({self.size} bytes)")
        return buf + more, pos

    def value(self, vtype: int, keep: bool) -> object:
        try:
            t = gguf.GGUFValueType(vtype)
        except ValueError as e:
            raise self.fail(f"corrupt GGUF: unknown value type {vtype}") from e
        if t in _SCALARS:
            return self.unpack(_SCALARS[t])
        if t == gguf.GGUFValueType.STRING:
            return self.string()
        # ARRAY
        item_type = self.integer("<I")
        count = self.integer("<Q")
        if count > self.size:
            raise self.fail(f"truncated or corrupt GGUF: an array of {count} items cannot "
                            f"fit in this {self.size}-byte file")
        if item_type in _SCALARS and not keep:
            self.f.seek(count * struct.calcsize(_SCALARS[gguf.GGUFValueType(item_type)]),
                        os.SEEK_CUR)
            return count
        if item_type == gguf.GGUFValueType.STRING and not keep:
            self.skip_strings(count)
            return count
        if count > MAX_KEPT_ITEMS:
            raise self.fail(f"corrupt GGUF: a metadata array of {count:,} items where Ember "
                            f"reads at most {MAX_KEPT_ITEMS:,}")
        return [self.value(item_type, keep) for _ in range(count)]


def read_gguf(path: str | Path, *, check_architecture: bool = True) -> GGUFInfo:
    """Parse the header and tensor table; raise ModelFileError naming the file and the fault."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    with path.open("rb") as f:
        return parse_gguf(f, path.stat().st_size, path, check_architecture=check_architecture)


def parse_gguf(f: Readable, size: int, path: Path, *, label: str | None = None,
               check_architecture: bool = True, split_part: bool = False) -> GGUFInfo:
    """The header and tensor table of a GGUF of `size` bytes read from `f` at its start: a
    local file, or a remote one read by HTTP Range requests (app.pull.remote_gguf), which is
    why only the header's bytes are read (skipped arrays are skipped with seek). `label`
    names the file in errors (default: `path`). A `split_part` after the first of a split GGUF
    carries only its tensors and split.* keys, so it needs no architecture."""
    cur = _Cursor(f, size, Path(label) if label else path)
    head = f.read(4)
    if head != MAGIC:
        raise cur.fail(f"not a GGUF file (starts with {head!r}, expected b'GGUF')")
    version = cur.integer("<I")
    if version not in (2, 3):
        if version in (0x02000000, 0x03000000):
            raise cur.fail("big-endian GGUF is not supported")
        raise cur.fail(f"unsupported GGUF version {version} (Ember reads versions 2 and 3)")
    n_tensors = cur.integer("<Q")
    n_kv = cur.integer("<Q")
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
        raise cur.fail(f"corrupt GGUF header ({n_tensors} tensors, {n_kv} metadata keys)")

    metadata: dict[str, object] = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.integer("<I")
        metadata[key] = cur.value(vtype, keep=key in _KEEP_ARRAY_KEYS)

    data_bytes, params = 0, 0
    types: dict[str, int] = {}
    type_bytes: dict[str, int] = {}
    embedding = output = ("", 0)
    tensor_ends = 0
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.integer("<I")
        if n_dims > 8:
            raise cur.fail(f"corrupt GGUF: tensor {name!r} has {n_dims} dimensions")
        dims = [cur.integer("<Q") for _ in range(n_dims)]
        ttype = cur.integer("<I")
        offset = cur.integer("<Q")
        try:
            qtype = gguf.GGMLQuantizationType(ttype)
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError) as e:
            raise cur.fail(f"tensor {name!r} has unknown type {ttype}") from e
        elements = 1
        for d in dims:
            elements *= d
        nbytes = elements // block * type_size
        data_bytes += nbytes
        params += elements
        tensor_ends = max(tensor_ends, offset + nbytes)
        types[qtype.name] = types.get(qtype.name, 0) + 1
        type_bytes[qtype.name] = type_bytes.get(qtype.name, 0) + nbytes
        if name == "token_embd.weight":
            embedding = (qtype.name, nbytes)
        elif name == "output.weight":
            output = (qtype.name, nbytes)

    alignment = metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0:
        raise cur.fail(f"corrupt GGUF: general.alignment is {alignment!r}")
    data_start = -(-f.tell() // alignment) * alignment
    if data_start + tensor_ends > size:
        raise cur.fail(f"truncated GGUF: tensor data needs {data_start + tensor_ends:,} bytes, "
                       f"the file has {size:,}")
    arch = str(metadata.get("general.architecture", ""))
    if not arch and not split_part:
        raise cur.fail("GGUF has no general.architecture")
    if check_architecture and arch and arch not in KNOWN_ARCHITECTURES:
        raise cur.fail(f"unknown model architecture {arch!r} (not one llama.cpp knows)")
    if n_tensors == 0:
        raise cur.fail("GGUF holds no tensors")
    return GGUFInfo(path, version, arch, metadata, n_tensors, data_bytes, size, params, types,
                    type_bytes, embedding, output)


_SPLIT = re.compile(r"^(?P<base>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def split_parts(path: Path) -> list[Path]:
    """Every file of a GGUF model: its parts where `path` is the first of a split GGUF
    (llama.cpp's gguf-split names, NAME-00001-of-00003.gguf), else `path` alone."""
    m = _SPLIT.match(path.name)
    if not m or int(m["part"]) != 1:
        return [path]
    return [path.with_name(f"{m['base']}-{i:05d}-of-{m['count']}.gguf")
            for i in range(1, int(m["count"]) + 1)]


def merge_parts(parts: list[GGUFInfo]) -> GGUFInfo:
    """One GGUFInfo for a split GGUF: the first part's metadata, every part's tensors and
    bytes, so the fit model sees the whole model."""
    if not parts:
        raise ModelFileError("a split GGUF with no parts")
    types: dict[str, int] = {}
    type_bytes: dict[str, int] = {}
    for p in parts:
        for k, v in p.tensor_types.items():
            types[k] = types.get(k, 0) + v
        for k, v in p.type_bytes.items():
            type_bytes[k] = type_bytes.get(k, 0) + v
    embedding = next((p.embedding for p in parts if p.embedding[1]), ("", 0))
    output = next((p.output for p in parts if p.output[1]), ("", 0))
    return replace(parts[0], tensor_count=sum(p.tensor_count for p in parts),
                   data_bytes=sum(p.data_bytes for p in parts),
                   file_size=sum(p.file_size for p in parts),
                   params=sum(p.params for p in parts), tensor_types=types,
                   type_bytes=type_bytes, embedding=embedding, output=output)


def read_model_gguf(path: str | Path) -> GGUFInfo:
    """read_gguf of a model file; for the first part of a split GGUF, every part read and
    merged (the load plan must count all the weights, not the first part's)."""
    path = Path(path)
    parts = split_parts(path)
    if len(parts) == 1:
        return read_gguf(path)
    infos = [read_gguf(path)]
    for part in parts[1:]:
        if not part.is_file():
            raise ModelFileError(f"{part}: no such file (part of the split GGUF {path.name})")
        with part.open("rb") as f:
            infos.append(parse_gguf(f, part.stat().st_size, part, split_part=True))
    return merge_parts(infos)
