"""Download, verify and install a llama.cpp GPU backend module into the data folder
(`ember cuda install`), from its manifest (app.gpu_module.manifest).

Where things come from:
- the manifest: the one this Ember ships (`assets/cuda-module.json`, written where the release
  builds the module), or `--from` a URL, a file or a folder that holds one;
- the module file: the manifest's `url`, relative to the manifest (a release's asset, or a
  folder beside it);
- its runtime libraries: the pinned wheels of the package index the PyPI mirror source uses
  (app.pull.index_url: PyPI unless the settings name another), or the same wheel files in the
  `--from` folder, for a machine that cannot reach an index.

Every file is checked against the manifest's SHA-256 before anything is installed; a cut-off
download is continued with a Range request on the next try. The module and its libraries go
to `.new-<backend>`, which then replaces the installed folder by rename: an install that
fails or is cancelled leaves the previous module as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import time
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urljoin

import httpx

from app.config import Paths
from app.errors import ChecksumError, DownloadError
from app.gpu_module.installed import InstalledModule, installed, module_folder, modules_root
from app.gpu_module.manifest import ModuleManifest, RuntimeWheel, parse_manifest
from app.gpu_module.offer import MANIFEST_ENV, MANIFEST_FILE, manifest_named
from app.pull import http_file, simple_index
from app.pull.index_url import index_url
from app.pull.progress import Progress, ProgressFn, check_cancel, check_disk_space
from app.pull.pull_lock import pull_lock
from app.pull.pypi_mirror import index_client
from app.store import sha256_file
from backends.gpu_modules import MANIFEST_NAME, llama_cpp_version, this_platform

MAX_MANIFEST_BYTES = 1 << 20


@dataclass(frozen=True)
class ManifestSource:
    manifest: ModuleManifest
    where: str  # the manifest's URL or path, as the user gave it
    base: str  # what the module's relative url is relative to: a URL or a folder path
    local: Path | None  # the folder that may hold the files (an offline install)


def read_source(given: str | None) -> ManifestSource:
    """The manifest named by `given` (a URL, a manifest file, or a folder holding
    cuda-module.json), else by EMBER_CUDA_MANIFEST, else the one this Ember ships."""
    if given is None:
        given = manifest_named()
        if given is None:
            raise DownloadError(
                "this Ember build names no CUDA module to download (a release build ships "
                f"{MANIFEST_FILE}; {MANIFEST_ENV} may name one); build one with `bash "
                "packaging/llama_cpp_cuda.sh PYTHON --pack DIR` on a machine with the CUDA "
                "toolkit and run `ember cuda install --from DIR`")
    if given.startswith(("http://", "https://")):
        shown = http_file.redacted(given)
        body = bytearray()
        with index_client() as client:
            try:
                with client.stream("GET", given) as response:
                    if response.status_code != 200:
                        raise DownloadError(f"{shown}: HTTP {response.status_code}")
                    for chunk in response.iter_bytes():
                        body += chunk
                        if len(body) > MAX_MANIFEST_BYTES:  # read no more of it
                            raise DownloadError(f"{shown} is too large for a manifest")
                    final = str(response.url)
            except httpx.HTTPError as e:
                raise DownloadError(f"{shown} is unreachable ({type(e).__name__}: {e})") from e
        return ManifestSource(parse_manifest(bytes(body), given), given, final, None)
    path = Path(given).expanduser()
    if path.is_dir():
        path = path / MANIFEST_FILE
    if not path.is_file():
        raise DownloadError(f"{path}: no such manifest")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise DownloadError(f"{path} is too large for a manifest")
    folder = path.resolve().parent
    return ManifestSource(parse_manifest(path.read_bytes(), str(path)), str(path),
                          str(folder) + os.sep, folder)


def check_compatible(manifest: ModuleManifest, version: str | None = None) -> None:
    """A module of another llama.cpp build would not load (or would crash): refused before
    anything is downloaded."""
    if version is None:
        version = llama_cpp_version()
    if manifest.llama_cpp_version != version:
        raise DownloadError(f"the {manifest.backend} module was built for llama-cpp-python "
                            f"{manifest.llama_cpp_version}, and Ember runs {version}: it "
                            "would not load (a module of the same build is needed)")
    if manifest.platform != this_platform():
        raise DownloadError(f"the {manifest.backend} module is for {manifest.platform}, and "
                            f"this machine is {this_platform()}")


class _Meter:
    """Progress over every file of the install, in bytes on disk out of the download's."""

    def __init__(self, label: str, total: int, report: ProgressFn) -> None:
        self.label, self.total, self.report = label, total, report
        self.done = 0
        self.started = time.monotonic()
        self.fresh = 0  # bytes fetched by this run, for the speed

    def on_bytes(self, current: int, message: str) -> None:
        speed = (self.fresh + current) / max(time.monotonic() - self.started, 1e-6)
        self.report(Progress(self.label, "download", min(self.done + current, self.total),
                             self.total, speed, message))

    def finished(self, size: int, fetched: int) -> None:
        self.done += size
        self.fresh += fetched


def _copy_verified(src: Path, dest: Path, sha256: str, on_bytes: http_file.BytesFn,
                   cancel: threading.Event | None) -> Path:
    digest, done = hashlib.sha256(), 0
    part = dest.with_name(dest.name + ".part")
    with src.open("rb") as f, part.open("wb") as out:
        while block := f.read(1 << 22):
            check_cancel(cancel)
            digest.update(block)
            out.write(block)
            done += len(block)
            on_bytes(done, "")
    if digest.hexdigest() != sha256:
        part.unlink(missing_ok=True)
        raise ChecksumError(f"checksum mismatch for {src}: the manifest says {sha256}, the file "
                            f"is {digest.hexdigest()}; nothing was installed")
    os.replace(part, dest)
    return dest


def _verified_already(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_file(path) == sha256


def _fetch_module(client: httpx.Client, source: ManifestSource, work: Path, meter: _Meter,
                  cancel: threading.Event | None) -> Path:
    m = source.manifest.module
    dest = work / m.name
    if _verified_already(dest, m.sha256):
        return dest
    if source.local is not None and not m.url.startswith(("http://", "https://")):
        src = (source.local / m.url).resolve()
        if not src.is_relative_to(source.local) or not src.is_file():
            raise DownloadError(f"{source.where}: the module file {m.url} is not in "
                                f"{source.local}")
        return _copy_verified(src, dest, m.sha256, meter.on_bytes, cancel)
    return http_file.download(client, urljoin(source.base, m.url), dest, m.sha256,
                              meter.on_bytes, cancel)


def _fetch_wheel(client: httpx.Client, wheel: RuntimeWheel, source: ManifestSource, work: Path,
                 meter: _Meter, cancel: threading.Event | None) -> Path:
    dest = work / wheel.filename
    if _verified_already(dest, wheel.sha256):
        return dest
    if source.local is not None and (source.local / wheel.filename).is_file():
        return _copy_verified(source.local / wheel.filename, dest, wheel.sha256,
                              meter.on_bytes, cancel)
    index = index_url()
    files = simple_index.project_files(client, index.url, wheel.package)
    listed = next((f for f in files if f.filename == wheel.filename), None)
    if listed is None:
        raise DownloadError(f"the package index {http_file.redacted(index.url)} has no "
                            f"{wheel.filename} (set by {index.origin})")
    if listed.sha256 and listed.sha256.lower() != wheel.sha256:
        raise ChecksumError(f"the package index lists {wheel.filename} with SHA-256 "
                            f"{listed.sha256}, the manifest pins {wheel.sha256}: not "
                            "downloaded")
    return http_file.download(client, listed.url, dest, wheel.sha256, meter.on_bytes, cancel)


def _extract_libraries(wheel_file: Path, wheel: RuntimeWheel, into: Path) -> int:
    """The wheel's libraries the manifest names, flat into `into`; their bytes."""
    written = 0
    try:
        with zipfile.ZipFile(wheel_file) as z:
            for member in wheel.libraries:
                try:
                    info = z.getinfo(member)
                except KeyError:
                    raise DownloadError(f"{wheel.filename} has no {member}") from None
                name = RuntimeWheel.library_name(member)
                with z.open(info) as src, (into / name).open("wb") as out:
                    shutil.copyfileobj(src, out, 1 << 22)
                written += info.file_size
    except zipfile.BadZipFile as e:
        wheel_file.unlink(missing_ok=True)
        raise ChecksumError(f"{wheel.filename} is not a valid wheel ({e}); removed it") from e
    return written


def _unpacked_bytes(wheel_file: Path, wheel: RuntimeWheel) -> int:
    try:
        with zipfile.ZipFile(wheel_file) as z:
            return sum(z.getinfo(m).file_size for m in wheel.libraries if m in z.namelist())
    except zipfile.BadZipFile:
        return 0


def install(p: Paths, source: ManifestSource, report: ProgressFn,
            cancel: threading.Event | None = None,
            llama_cpp_version: str | None = None) -> InstalledModule:
    """One install of a backend's module at a time: a second (the window and `ember cuda
    install` together) waits for the first, then finds the files it verified."""
    manifest = source.manifest
    check_compatible(manifest, llama_cpp_version)
    label = f"llama.cpp {manifest.backend} module"
    lock = modules_root(p) / f".{manifest.backend}.lock"
    with pull_lock(lock, cancel, lambda: report(Progress(
            label, "download", 0, manifest.download_bytes,
            message="waiting for another install of it to finish"))):
        return _install(p, source, report, cancel, label)


def _install(p: Paths, source: ManifestSource, report: ProgressFn,
             cancel: threading.Event | None, label: str) -> InstalledModule:
    manifest = source.manifest
    root = modules_root(p)
    work = root / ".partial" / manifest.backend
    work.mkdir(parents=True, exist_ok=True)
    on_disk = sum(f.stat().st_size for f in work.iterdir() if f.is_file())
    # the downloads, then the module and libraries unpacked (at most as large again)
    check_disk_space(root, 2 * manifest.download_bytes - on_disk)
    meter = _Meter(label, manifest.download_bytes, report)
    with index_client() as client:
        module = _fetch_module(client, source, work, meter, cancel)
        meter.finished(manifest.module.bytes, manifest.module.bytes)
        wheels = []
        for wheel in manifest.runtime:
            wheels.append(_fetch_wheel(client, wheel, source, work, meter, cancel))
            meter.finished(wheel.bytes, wheel.bytes)
    check_cancel(cancel)

    unpacked = sum(_unpacked_bytes(f, w) for f, w in zip(wheels, manifest.runtime, strict=True))
    check_disk_space(root, manifest.module.bytes + unpacked)
    report(Progress(label, "install", 0, manifest.module.bytes + unpacked,
                    message="unpacking the runtime libraries" if manifest.runtime else ""))
    new, old, final = root / f".new-{manifest.backend}", root / f".old-{manifest.backend}", \
        module_folder(p, manifest.backend)
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    try:
        shutil.copyfile(module, new / manifest.module.name)
        for wheel_file, wheel in zip(wheels, manifest.runtime, strict=True):
            _extract_libraries(wheel_file, wheel, new)
        report(Progress(label, "install", manifest.module.bytes + unpacked,
                        manifest.module.bytes + unpacked))
        record = manifest.to_json() | {
            "installed_from": source.where,
            "installed_at": datetime.now(UTC).isoformat(timespec="seconds")}
        (new / MANIFEST_NAME).write_text(json.dumps(record, indent=2), encoding="utf-8")
        check_cancel(cancel)
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            os.replace(final, old)
        os.replace(new, final)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        if old.exists() and not final.exists():
            os.replace(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    with contextlib.suppress(OSError):  # another backend's download may be there
        work.parent.rmdir()
    done = installed(p, manifest.backend)
    assert done is not None
    report(Progress(label, "done", done.bytes_on_disk, done.bytes_on_disk,
                    message=f"installed in {final}"))
    return done
