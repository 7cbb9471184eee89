"""The Hugging Face hub source, through huggingface_hub.

huggingface_hub gives us the URL, the auth headers (`HF_TOKEN`), the file's metadata, the
mapping of hub errors (gated, missing) and its HTTP session; it also tells us when a file is
already in the user's hub cache, which we reuse. The byte transfer is ours, because
huggingface_hub 2.x downloads into a per-process temporary file that it deletes on failure
(huggingface_hub PR 4228), so a dropped connection or a killed process would start over.
Ours writes `<file>.part` in the work folder and continues it with an HTTP Range request.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.errors import ChecksumError, DownloadError
from app.pull.progress import (
    Progress,
    ProgressFn,
    check_cancel,
    check_disk_space,
    sha256_with_progress,
)
from app.registry import ModelSpec, Source, Variant

RETRIES = 5
_SHA256 = re.compile(r"[0-9a-f]{64}")
_GIT_SHA1 = re.compile(r"[0-9a-f]{40}")
CHUNK = 1 << 20


class HubUnreachableError(DownloadError):
    pass


class GatedRepoError(DownloadError):
    pass


def _endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None  # read per call: tests and users set it late


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def find_in_hub_cache(repo: str, filename: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, filename,
                                   cache_dir=os.environ.get("HF_HUB_CACHE") or None)
    return Path(found) if isinstance(found, str) else None


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.unlink(missing_ok=True)
    try:
        os.link(src.resolve(), dst)  # same disk: no second copy of a multi-GB file
    except OSError:
        shutil.copyfile(src, dst)


def gated_message(repo: str) -> str:
    """The one line a gated repo without access gets."""
    return (f"{repo} is gated: accept its license on https://huggingface.co/{repo} while "
            "logged in, then set HF_TOKEN to a token of that account and pull again")


@contextmanager
def hub_errors(repo: str, what: str) -> Iterator[None]:
    """huggingface_hub's errors for `what` (a file, a listing) as errors a user can act on."""
    import httpx2
    from huggingface_hub import errors as hf_errors

    try:
        yield
    except hf_errors.GatedRepoError as e:
        raise GatedRepoError(gated_message(repo)) from e
    except (hf_errors.RepositoryNotFoundError, hf_errors.RemoteEntryNotFoundError) as e:
        status = e.response.status_code if e.response is not None else "?"
        hint = " (a private or gated repo needs HF_TOKEN)" if status in (401, 403) else ""
        raise DownloadError(f"{what} not found on the hub (HTTP {status}){hint}") from e
    except hf_errors.HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise DownloadError(f"the hub answered HTTP {status} for {what}") from e
    except (httpx2.TransportError, hf_errors.OfflineModeIsEnabled, OSError) as e:
        raise HubUnreachableError(f"Hugging Face hub unreachable ({type(e).__name__})") from e


def _metadata(repo: str, filename: str):  # huggingface_hub.HfFileMetadata
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo, filename, endpoint=_endpoint())
    with hub_errors(repo, f"{repo}/{filename}"):
        return get_hf_file_metadata(url, token=_token(), timeout=15)


def list_repo(repo: str) -> list:
    """Every file of a model repo (huggingface_hub RepoFile: path, size, blob_id, lfs)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    with hub_errors(repo, f"the repo {repo}"):
        tree = HfApi(endpoint=_endpoint(), token=_token()).list_repo_tree(repo, recursive=True)
        return [f for f in tree if isinstance(f, RepoFile)]


def _transfer(url: str, part: Path, size: int, ref: str, report: ProgressFn,
              cancel: threading.Event | None) -> None:
    import httpx2
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    started, start_bytes = time.monotonic(), part.stat().st_size if part.exists() else 0
    if start_bytes:
        report(Progress(ref, "download", start_bytes, size, message="resuming"))
    for attempt in range(RETRIES + 1):
        have = part.stat().st_size if part.exists() else 0
        if have >= size:
            return
        headers = build_hf_headers(token=_token())
        headers["Accept-Encoding"] = "identity"
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            with get_session().stream("GET", url, headers=headers, follow_redirects=True,
                                      timeout=30) as response:
                hf_raise_for_status(response)
                mode = "ab" if have and response.status_code == 206 else "wb"
                done = have if mode == "ab" else 0
                with part.open(mode) as out:
                    for chunk in response.iter_bytes(CHUNK):
                        check_cancel(cancel)
                        out.write(chunk)
                        done += len(chunk)
                        speed = (done - start_bytes) / max(time.monotonic() - started, 1e-6)
                        report(Progress(ref, "download", min(done, size), size, speed))
            if part.stat().st_size >= size:
                return
        except httpx2.TransportError as e:
            if attempt == RETRIES:
                raise DownloadError(f"download of {ref} kept failing ({e}); run pull again "
                                    "to resume") from e
            report(Progress(ref, "download", have, size,
                            message=f"connection lost ({type(e).__name__}); resuming"))
            time.sleep(min(2**attempt * 0.5, 8))
    raise DownloadError(f"download of {ref} ended early; run pull again to resume")


@dataclass(frozen=True)
class Expected:
    """What a file from the hub must be: its size, and its SHA-256 (the registry's, or the
    hub's LFS oid) or, for a small file kept in git rather than LFS, its git blob id."""
    size: int | None
    sha256: str | None = None
    git_sha1: str | None = None


def git_blob_sha1(path: Path) -> str:
    """The id git gives a file's content (what the hub lists as `oid` for non-LFS files)."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _verified(path: Path, expected: Expected, ref: str, report: ProgressFn) -> tuple[str, bool]:
    """The file's SHA-256, and whether it is what `expected` says (True when nothing but
    the size is known)."""
    actual = sha256_with_progress(path, ref, report)
    if expected.sha256:
        return actual, actual == expected.sha256
    if expected.git_sha1:
        return actual, git_blob_sha1(path) == expected.git_sha1
    return actual, True


def download_file(repo: str, filename: str, dest: Path, expected: Expected, ref: str,
                  report: ProgressFn, cancel: threading.Event | None) -> str:
    """`repo`/`filename` into `dest`, resumed from `dest`.part, verified; returns its SHA-256.
    A damaged download is removed and raises ChecksumError; `dest` appears only verified."""
    cached = find_in_hub_cache(repo, filename)
    if cached is not None:
        report(Progress(ref, "download", expected.size or 0, expected.size or 0,
                        message=f"found in the Hugging Face cache: {cached}"))
        _link_or_copy(cached, dest)
        digest, ok = _verified(dest, expected, ref, report)
        if ok:
            return digest
        dest.unlink()
        report(Progress(ref, "download", 0, expected.size or 0,
                        message=f"the cached copy {cached} is damaged (SHA-256); downloading"))

    meta = _metadata(repo, filename)
    size = meta.size or expected.size or 0
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    check_disk_space(dest.parent, size - have)
    _transfer(meta.location, part, size, ref, report, cancel)
    if part.stat().st_size != size:
        got = part.stat().st_size
        part.unlink()
        raise ChecksumError(f"{filename} from the hub is {got} bytes, expected {size}; the "
                            "download was removed")
    # Without a registry checksum, the hub's: an LFS file's ETag is its SHA-256, a git file's
    # its blob id.
    etag = meta.etag or ""
    if not (expected.sha256 or expected.git_sha1):
        expected = Expected(size, etag if _SHA256.fullmatch(etag) else None,
                            etag if _GIT_SHA1.fullmatch(etag) else None)
    if not (expected.sha256 or expected.git_sha1):
        report(Progress(ref, "verify", size, size, message=f"no checksum known for "
                        f"{filename}; only its size was checked"))
    digest, ok = _verified(part, expected, ref, report)
    if not ok:
        part.unlink()
        want = expected.sha256 or f"git blob {expected.git_sha1}"
        raise ChecksumError(f"checksum mismatch for {filename} from {repo}: expected {want}, "
                            f"got SHA-256 {digest}; the download was removed and nothing was "
                            "installed")
    os.replace(part, dest)
    return digest


def fetch(spec: ModelSpec, variant: Variant, source: Source, work: Path, report: ProgressFn,
          cancel: threading.Event | None) -> Path:
    assert source.repo and source.file
    target = work / variant.file
    download_file(source.repo, source.file, target, Expected(variant.size_bytes, variant.sha256),
                  f"{spec.id}:{variant.quant}", report, cancel)
    return target
