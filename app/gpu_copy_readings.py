"""The best copy bandwidth seen on each GPU (backends.llamacpp.device_bandwidth measures it
whenever the GPUs are asked for), kept in the data folder's gpu-bandwidth.json: a copy that
ran beside a game or a training job reads low, and must not stand for the card afterwards.
Others' work only lowers what a copy sees, so the highest reading is the card's."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from app import config

FILE_NAME = "gpu-bandwidth.json"


@dataclass(frozen=True)
class CopyReading:
    gbps: float
    measured_at: str  # ISO 8601, local time with its offset


def _key(description: str, memory_total: int) -> str:
    return f"{description}|{memory_total}"


def _kept(path: Path) -> dict[str, CopyReading]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {str(k): CopyReading(float(v["gbps"]), str(v["measured_at"]))
                for k, v in raw.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}  # none yet, or damaged: measured again, written anew


def best_reading(description: str, memory_total: int, measured: float | None,
                 path: Path | None = None) -> CopyReading | None:
    """The GPU's best reading: `measured` (GB/s, just now) when it beats the one kept, which
    it then replaces; None where it was never measured."""
    path = path or config.paths().home / FILE_NAME
    kept = _kept(path)
    key = _key(description, memory_total)
    best = kept.get(key)
    if measured and (best is None or measured > best.gbps):
        best = CopyReading(measured, datetime.now().astimezone().isoformat(timespec="seconds"))
        kept[key] = best
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({k: asdict(v) for k, v in kept.items()}, indent=1),
                            encoding="utf-8")
        except OSError:
            pass  # a read-only data folder: measured again next time
    return best
