"""What every download source shares: progress events, cancellation, disk and checksum checks."""

from __future__ import annotations

import hashlib
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.errors import DownloadError
from backends.errors import EmberError

DISK_MARGIN_BYTES = 64 << 20


@dataclass(frozen=True)
class Progress:
    """One progress report, for the terminal bar and the GUI alike."""
    model: str
    phase: str  # "download" | "verify" | "install" | "done"
    done_bytes: int
    total_bytes: int
    speed_bps: float = 0.0
    message: str = ""

    @property
    def eta_s(self) -> float | None:
        if self.speed_bps <= 0 or self.done_bytes >= self.total_bytes:
            return None
        return (self.total_bytes - self.done_bytes) / self.speed_bps


ProgressFn = Callable[[Progress], None]


class Cancelled(EmberError):
    pass


def check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("download cancelled; run pull again to resume")


def check_disk_space(folder: Path, needed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < needed + DISK_MARGIN_BYTES:
        raise DownloadError(f"not enough disk space in {folder}: need {needed / 1e9:.2f} GB, "
                            f"{free / 1e9:.2f} GB free")


def sha256_with_progress(path: Path, ref: str, report: ProgressFn) -> str:
    total = path.stat().st_size
    digest, done = hashlib.sha256(), 0
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
            done += len(block)
            report(Progress(ref, "verify", done, total))
    return digest.hexdigest()
