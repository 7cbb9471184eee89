"""The Hugging Face hub source, through huggingface_hub.

huggingface_hub gives us the URL, the auth headers (`HF_TOKEN`), the file's metadata, the
mapping of hub errors (gated, missing) and its HTTP session; it also tells us when a file is
already in the user's hub cache, which we reuse. The byte transfer is ours, because
huggingface_hub 2.x downloads into a per-process temporary file that it deletes on failure
(huggingface_hub PR 4228), so a dropped connection or a killed process would start over.
Ours writes `<file>.part` in the work folder and continues it with an HTTP Range request.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from pathlib import Path

from app.errors import ChecksumError, DownloadError
from app.registry import ModelSpec, Source, Variant
from app.transfer import (
    Progress,
    ProgressFn,
    check_cancel,
    check_disk_space,
    sha256_with_progress,
)

RETRIES = 5
_SHA256 = re.compile(r"[0-9a-f]{64}")
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


def _metadata(repo: str, filename: str):  # noqa: ANN202 - huggingface_hub.HfFileMetadata
    import httpx2
    from huggingface_hub import errors as hf_errors
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo, filename, endpoint=_endpoint())
    try:
        return get_hf_file_metadata(url, token=_token(), timeout=15)
    except hf_errors.GatedRepoError as e:
        raise GatedRepoError(
            f"{repo} is gated: accept its license on https://huggingface.co/{repo} while "
            "logged in, then set HF_TOKEN to a token of that account and pull again") from e
    except (hf_errors.RepositoryNotFoundError, hf_errors.RemoteEntryNotFoundError) as e:
        status = e.response.status_code if e.response is not None else "?"
        hint = " (a private or gated repo needs HF_TOKEN)" if status in (401, 403) else ""
        raise DownloadError(f"{repo}/{filename} not found on the hub (HTTP {status}){hint}") from e
    except hf_errors.HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise DownloadError(f"the hub answered HTTP {status} for {repo}/{filename}") from e
    except (httpx2.TransportError, hf_errors.OfflineModeIsEnabled, OSError) as e:
        raise HubUnreachableError(f"Hugging Face hub unreachable ({type(e).__name__})") from e


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


def fetch(spec: ModelSpec, variant: Variant, source: Source, work: Path, report: ProgressFn,
          cancel: threading.Event | None) -> Path:
    ref = f"{spec.id}:{variant.quant}"
    assert source.repo and source.file
    target = work / variant.file
    cached = find_in_hub_cache(source.repo, source.file)
    if cached is not None:
        report(Progress(ref, "download", variant.size_bytes, variant.size_bytes,
                        message=f"found in the Hugging Face cache: {cached}"))
        _link_or_copy(cached, target)
        if not variant.sha256 or sha256_with_progress(target, ref, report) == variant.sha256:
            return target
        target.unlink()
        report(Progress(ref, "download", 0, variant.size_bytes,
                        message=f"the cached copy {cached} is damaged (SHA-256); downloading"))

    meta = _metadata(source.repo, source.file)
    size = meta.size or variant.size_bytes
    part = work / (variant.file + ".part")
    have = part.stat().st_size if part.exists() else 0
    check_disk_space(work, size - have)
    _transfer(meta.location, part, size, ref, report, cancel)
    if part.stat().st_size != size:
        part.unlink()
        raise ChecksumError(f"{variant.file} from the hub is {part.stat().st_size} bytes, "
                            f"expected {size}; the download was removed")
    # The registry's checksum, else the hub's: an LFS file's ETag is its SHA-256.
    expected = variant.sha256 or (meta.etag if _SHA256.fullmatch(meta.etag or "") else None)
    if expected is None:
        report(Progress(ref, "verify", size, size, message="no SHA-256 known for this file; "
                        "only its size was checked"))
    else:
        actual = sha256_with_progress(part, ref, report)
        if actual != expected:
            part.unlink()
            raise ChecksumError(f"checksum mismatch for {variant.file} from {source.repo}: "
                                f"expected {expected}, got {actual}; the download was "
                                "removed and nothing was installed")
    os.replace(part, target)
    return target
