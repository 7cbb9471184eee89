"""A directory model from the Hugging Face hub: an MLX repo (config.json, tokenizer files,
safetensors weights, maybe sharded with an index), fetched file by file and verified.

Which files: the registry's list for the variant (`files`, each with its SHA-256) or, where it lists
none, the hub's listing of the repo (huggingface_hub's `list_repo_tree`) filtered to what mlx-lm
loads. Each file goes through `app.pull.hf_hub.download_file`: reused from the user's hub cache,
else resumed from its `.part`, and checked against the registry's SHA-256, else the hub's (the LFS
SHA-256 of weights, the git blob id of small files kept in git). A verified file keeps its name in
the work folder and is recorded in `verified.json`, so a pull that stops (a dropped link, a cancel,
a damaged file) fetches only what is still missing the next time.
"""

from __future__ import annotations

import fnmatch
import json
import threading
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from app.errors import DownloadError
from app.pull import hf_hub
from app.pull.progress import Progress, ProgressFn, check_disk_space
from app.registry import ModelSpec, Source, Variant

# mlx-lm's download patterns (mlx_lm.utils.DEFAULT_ALLOW_PATTERNS), copied because importing
# mlx_lm loads MLX, which the main process must not do.
ALLOW_PATTERNS = ("*.json", "model*.safetensors", "*.py", "tokenizer.model", "*.tiktoken",
                  "tiktoken.model", "*.txt", "*.jsonl", "*.jinja")
VERIFIED = "verified.json"  # in the work folder: file name -> SHA-256 of finished files


@dataclass(frozen=True)
class RepoFile:
    name: str  # path in the repo, "/"-separated
    expected: hf_hub.Expected


@dataclass(frozen=True)
class Snapshot:
    folder: Path  # the model directory, complete and verified
    sha256: dict[str, str]  # file name -> SHA-256, for the store's digest of the directory


def safe_name(name: str, repo: str) -> str:
    """A repo path that stays inside the model directory (a hostile listing cannot write
    elsewhere)."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise DownloadError(f"{repo} lists a file with an unsafe name: {name!r}")
    return name


def wanted(name: str) -> bool:
    return any(fnmatch.fnmatch(PurePosixPath(name).name, p) for p in ALLOW_PATTERNS)


def repo_files(variant: Variant, repo: str) -> list[RepoFile]:
    if variant.files:
        return [RepoFile(safe_name(f.name, repo), hf_hub.Expected(f.size_bytes, f.sha256))
                for f in variant.files]
    files = [RepoFile(safe_name(f.path, repo),
                      hf_hub.Expected(f.size, f.lfs.sha256 if f.lfs else None,
                                   None if f.lfs else f.blob_id))
             for f in hf_hub.list_repo(repo) if wanted(f.path)]
    if not any(f.name.endswith(".safetensors") for f in files):
        raise DownloadError(f"{repo} has no *.safetensors weights on the hub: not an MLX "
                            "model repo")
    return files


def _offset(report: ProgressFn, before: int, total: int) -> ProgressFn:
    """One file's progress as progress through the whole snapshot."""
    return lambda p: report(replace(p, done_bytes=before + p.done_bytes, total_bytes=total))


def _read_verified(work: Path) -> dict[str, str]:
    try:
        data = json.loads((work / VERIFIED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def fetch(spec: ModelSpec, variant: Variant, source: Source, work: Path, report: ProgressFn,
          cancel: threading.Event | None) -> Snapshot:
    assert source.repo
    return fetch_files(source.repo, repo_files(variant, source.repo),
                       f"{spec.id}:{variant.quant}", work, report, cancel)


def fetch_files(repo: str, files: list[RepoFile], ref: str, work: Path, report: ProgressFn,
                cancel: threading.Event | None) -> Snapshot:
    """`files` of `repo` into `work`/files/, each verified, resumed where a pull stopped."""
    folder = work / "files"
    folder.mkdir(parents=True, exist_ok=True)
    verified = _read_verified(work)

    def finished(f: RepoFile) -> bool:
        """Verified by an earlier pull: its digest is the one pinned, where one is. (Not its
        size: a registry's size may be approximate, and the hub's was checked then.)"""
        dest = folder / f.name
        return f.name in verified and dest.is_file() and (
            not f.expected.sha256 or verified[f.name] == f.expected.sha256)

    total = sum(f.expected.size or 0 for f in files)
    done = sum((folder / f.name).stat().st_size for f in files if finished(f))
    if done:
        report(Progress(ref, "download", done, total, message="resuming"))
    check_disk_space(work, total - done)
    for f in files:
        if finished(f):
            continue
        dest = folder / safe_name(f.name, repo)
        dest.parent.mkdir(parents=True, exist_ok=True)
        verified[f.name] = hf_hub.download_file(repo, f.name, dest, f.expected, ref,
                                                _offset(report, done, total), cancel)
        (work / VERIFIED).write_text(json.dumps(verified, indent=1), encoding="utf-8")
        done += dest.stat().st_size
    names = {f.name for f in files}
    return Snapshot(folder, {name: digest for name, digest in verified.items() if name in names})
