"""A Hub repository's files, grouped into what a user picks: quantizations.

One GGUF file is one quantization; a split GGUF (`NAME-00001-of-00003.gguf`, llama.cpp's
gguf-split) is one too, its parts in order and their sizes summed; `mmproj*.gguf` files are
vision projectors that go with every quantization, not quantizations. A repo with config.json
and *.safetensors at its root is one directory model: MLX (mlx-community repos: the `mlx`
tag or library) or plain safetensors weights. The quantization's name is read from the file
name (Q4_K_M, IQ4_XS, BF16, UD-Q4_K_XL ...), as Ollama and LM Studio do.

The listing comes from huggingface_hub's `model_info(files_metadata=True)`: one request gives
the files with their sizes and LFS SHA-256, the gated flag, the licence and the commit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from app.errors import DownloadError
from app.pull import hf_hub
from app.pull.hf_snapshot import safe_name, wanted

# llama.cpp's quantization names (gguf.LlamaFileType), with unsloth's dynamic "UD-" prefix and
# the _XL/_XXS suffixes; the last match in a file name wins ("Q4_K_M" in "x-Q4_K_M.gguf").
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q[1-8]_(?:K_)?(?:XXS|XS|XL|NL|S|M|L|0|1|K)?|"
    r"TQ[12]_0|MXFP4(?:_MOE)?|BF16|F16|F32|FP16|FP8))(?![A-Za-z0-9])", re.IGNORECASE)
_SPLIT = re.compile(r"^(?P<base>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_MLX_BITS = re.compile(r"(?<![0-9])([2-8])-?bits?(?![a-z])", re.IGNORECASE)
MAX_SPLIT_PARTS = 512
OWN_SUFFIXES = (".ember.json", ".part", ".lock")
MAX_FILE_BYTES = 2 << 40  # 2 TiB: above this a listing is lying


@dataclass(frozen=True)
class HubFile:
    name: str  # path in the repo, "/"-separated, checked by safe_name
    size: int
    sha256: str | None = None  # LFS files
    git_sha1: str | None = None  # small files kept in git

    @property
    def expected(self) -> hf_hub.Expected:
        return hf_hub.Expected(self.size, self.sha256, self.git_sha1)

    @property
    def basename(self) -> str:
        return PurePosixPath(self.name).name


@dataclass(frozen=True)
class Quant:
    name: str  # Q4_K_M, UD-Q4_K_XL, 4bit ...
    format: str  # "gguf" | "mlx" | "safetensors"
    files: tuple[HubFile, ...]  # a GGUF's parts in order; a directory model's files

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def split(self) -> bool:
        return self.format == "gguf" and len(self.files) > 1


@dataclass(frozen=True)
class RepoListing:
    repo: str
    sha: str | None
    gated: bool
    license: str | None
    quants: tuple[Quant, ...]
    projectors: tuple[HubFile, ...] = ()  # mmproj*.gguf
    tags: tuple[str, ...] = field(default_factory=tuple)

    def quant(self, name: str) -> Quant:
        """The quantization called `name` (any case); a missing one lists those there are."""
        for q in self.quants:
            if q.name.lower() == name.lower():
                return q
        known = ", ".join(q.name for q in self.quants) or "none"
        raise DownloadError(f"hf.co/{self.repo} has no quantization {name!r}; it has: {known}")

    def projector(self) -> HubFile | None:
        """The vision projector to fetch with a model: F16 where there are several."""
        if not self.projectors:
            return None
        return next((p for p in self.projectors if "f16" in p.basename.lower()
                     and "bf16" not in p.basename.lower()), self.projectors[0])


def quant_name(filename: str) -> str | None:
    """The quantization a GGUF file's name says (upper case), or None."""
    stem = PurePosixPath(filename).name
    stem = _SPLIT.sub(lambda m: m["base"], stem) if _SPLIT.match(stem) else stem
    found = _QUANT.findall(stem.removesuffix(".gguf").removesuffix(".GGUF"))
    return found[-1].upper() if found else None


def is_projector(filename: str) -> bool:
    return PurePosixPath(filename).name.lower().startswith("mmproj")


def _checked(repo: str, name: str, size: object) -> int:
    if not isinstance(size, int) or size < 0 or size > MAX_FILE_BYTES:
        raise DownloadError(f"hf.co/{repo} lists {name!r} with an impossible size {size!r}")
    return size


def group_files(repo: str, files: list[HubFile], tags: tuple[str, ...] = ()) -> tuple[
        tuple[Quant, ...], tuple[HubFile, ...]]:
    """(quantizations, vision projectors) of a repo's files. Files named like Ember's own
    (a store manifest, a partial download) are never taken: in the store they would be
    read as Ember's."""
    files = [f for f in files if not f.name.endswith(OWN_SUFFIXES)]
    ggufs = [f for f in files if f.name.lower().endswith(".gguf")]
    projectors = tuple(f for f in ggufs if is_projector(f.name))
    singles: list[Quant] = []
    splits: dict[tuple[str, int], dict[int, HubFile]] = {}
    for f in ggufs:
        if is_projector(f.name):
            continue
        m = _SPLIT.match(f.basename)
        if m:
            count = int(m["count"])
            if not 1 <= int(m["part"]) <= count <= MAX_SPLIT_PARTS:
                raise DownloadError(f"hf.co/{repo} lists {f.name!r}: not a valid split part")
            folder = str(PurePosixPath(f.name).parent)
            splits.setdefault((f"{folder}/{m['base']}", count), {})[int(m["part"])] = f
            continue
        singles.append(Quant(quant_name(f.name) or PurePosixPath(f.name).stem, "gguf", (f,)))
    for (base, count), parts in sorted(splits.items()):
        if sorted(parts) != list(range(1, count + 1)):
            continue  # an incomplete set cannot be loaded: not offered
        first = parts[1]
        name = quant_name(first.name) or PurePosixPath(base).name
        singles.append(Quant(name, "gguf", tuple(parts[i] for i in range(1, count + 1))))
    quants = _unique(singles)
    directory = _directory_model(repo, files, tags)
    return (tuple(quants) + ((directory,) if directory else ())), projectors


def _unique(quants: list[Quant]) -> list[Quant]:
    """Quantization names as a user types them: one that two files share is named by the
    file instead."""
    seen: dict[str, int] = {}
    for q in quants:
        seen[q.name.lower()] = seen.get(q.name.lower(), 0) + 1
    out = []
    for q in sorted(quants, key=lambda q: (q.size, q.name)):
        if seen[q.name.lower()] > 1:
            q = Quant(PurePosixPath(q.files[0].name).stem, q.format, q.files)
        out.append(q)
    return out


def _directory_model(repo: str, files: list[HubFile], tags: tuple[str, ...]) -> Quant | None:
    root = [f for f in files if "/" not in f.name]
    names = {f.name for f in root}
    if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
        return None
    fmt = "mlx" if "mlx" in tags else "safetensors"
    bits = _MLX_BITS.search(repo.split("/")[-1])
    name = f"{bits[1]}bit" if bits else ("mlx" if fmt == "mlx" else "safetensors")
    return Quant(name, fmt, tuple(f for f in root if wanted(f.name)))


def list_quants(repo: str, revision: str | None = None) -> RepoListing:
    """The repo's quantizations, from one model_info request."""
    from huggingface_hub import HfApi

    with hf_hub.hub_errors(repo, f"the repo {repo}"):
        info = HfApi(endpoint=hf_hub._endpoint(), token=hf_hub._token()).model_info(
            repo, revision=revision, files_metadata=True)
    files = []
    for s in info.siblings or []:
        name = safe_name(s.rfilename, repo)
        size = _checked(repo, name, s.lfs.size if s.lfs else s.size)
        files.append(HubFile(name, size, s.lfs.sha256 if s.lfs else None,
                             None if s.lfs else s.blob_id))
    tags = tuple(info.tags or ())
    if info.library_name and info.library_name not in tags:
        tags += (info.library_name,)
    quants, projectors = group_files(repo, files, tags)
    card = info.card_data.to_dict() if info.card_data is not None else {}
    licence = card.get("license") or next(
        (t.removeprefix("license:") for t in tags if t.startswith("license:")), None)
    return RepoListing(repo, info.sha, bool(info.gated), str(licence) if licence else None,
                       quants, projectors, tags)
