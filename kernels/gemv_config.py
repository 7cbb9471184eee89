"""Launch configurations of the 1-16 row GEMV (kernels.gemv_triton): the default, the small
space the GPU sweep tries, and the JSON file that keeps each sweep's winner per (device name,
layout, row bucket, N, K, group) so that a second start does not re-tune.

No Triton here: this is data, readable without a GPU. The file lives in Ember's data folder
(`app.config.Paths.kernel_tuning`: EMBER_HOME, else the platform's user data dir, then
`cache/kernel-tuning.json`); kernels/ may not import app/ (tests/unit/test_layering.py), so the
rule is repeated below and a unit test holds the two equal. `EMBER_KERNEL_TUNING` names
another file. A damaged file is ignored (with a warning) and replaced by the next sweep.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import platformdirs

log = logging.getLogger("ember.kernels")

MAX_ROWS = 16
ROW_BUCKETS = (1, 2, 4, 8, 16)
TUNING_ENV = "EMBER_KERNEL_TUNING"
FILE_VERSION = 1
MIN_K_PER_SPLIT = 256  # a split shorter than this cannot hide the first loads' latency


@dataclass(frozen=True)
class GemvConfig:
    block_n: int  # outputs per program (all M rows of them)
    block_k: int  # inputs per loop step (int4: block_k / 8 rows of words)
    split_k: int  # programs along K; partial sums added by a second, fixed-order pass
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        for name in ("block_n", "block_k"):
            v = getattr(self, name)
            if v < 8 or v & (v - 1):
                raise ValueError(f"{name} must be a power of two >= 8, got {v}")
        if self.split_k < 1 or self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise ValueError(f"bad GEMV config {self}")


@dataclass(frozen=True)
class TuneKey:
    device: str  # torch.cuda.get_device_name()
    layout: str  # "int4" or "int8"
    rows: int  # the row bucket: 1, 2, 4, 8, 16 (the kernel's BLOCK_M)
    n: int
    k: int
    group: int

    def text(self) -> str:
        return f"{self.device}|{self.layout}|m{self.rows}|n{self.n}|k{self.k}|g{self.group}"


def row_bucket(m: int) -> int:
    if not 1 <= m <= MAX_ROWS:
        raise ValueError(f"the GEMV takes 1-{MAX_ROWS} rows, got {m}")
    return next(b for b in ROW_BUCKETS if b >= m)


def _splits(n: int, k: int, block_n: int, block_k: int, sms: int) -> list[int]:
    """Split counts worth trying: the smallest that gives every SM a program, and twice that
    (latency hiding), each keeping a split's K loop at least MIN_K_PER_SPLIT long."""
    tiles = -(-n // block_n)
    most = max(1, k // max(MIN_K_PER_SPLIT, block_k))
    first = 1
    while tiles * first < sms and first * 2 <= most:
        first *= 2
    return sorted({first, min(first * 2, most)})


def _k_step_cap(layout: str, k: int, group: int) -> int:
    """The longest K step inside one group (one row of scales a step): the largest power of
    two dividing the group; per-channel int8 (group K) has no such limit."""
    if layout == "int8" and group == k:
        return 1 << 30
    return group & -group


def default_config(layout: str, m: int, n: int, k: int, group: int, sms: int) -> GemvConfig:
    """Reasoned, not tuned: 128 outputs a program up to 4 rows (64 above, with 8 warps), and
    the longest K step whose broadcast product (rows x block_n x block_k values, int4 one
    nibble plane of block_k / 8 at a time) stays within 32 float32 registers a thread;
    split-K until every SM has a program."""
    rows = row_bucket(m)
    block_n, warps = (128, 4) if rows <= 4 else (64, 8)
    per_k = rows * block_n // (8 if layout == "int4" else 1)
    lo, hi = (32, 256) if layout == "int4" else (16, 128)
    hi = max(lo, min(hi, _k_step_cap(layout, k, group)))
    block_k = lo
    while block_k * 2 <= hi and per_k * block_k * 2 <= 32 * 32 * warps:
        block_k *= 2
    return GemvConfig(block_n, block_k, _splits(n, k, block_n, block_k, sms)[0], warps, 2)


def config_space(layout: str, m: int, n: int, k: int, group: int, sms: int
                 ) -> list[GemvConfig]:
    """The sweep's candidates: block sizes whose broadcast product stays within 64 float32
    registers a thread, two split counts each, 4 or 8 warps, 2 or 4 stages."""
    rows = row_bucket(m)
    out = []
    for block_n in (64, 128, 256):
        for block_k in (16, 32, 64, 128, 256):
            for warps in (4, 8):
                # int4 multiplies one nibble plane (block_k / 8 rows) at a time
                product = rows * block_n * (block_k // 8 if layout == "int4" else block_k)
                if product > 64 * 32 * warps or product < 16 * 32 * warps:
                    continue
                if (layout == "int4" and block_k < 32) or \
                        block_k > max(16, _k_step_cap(layout, k, group)):
                    continue
                for split in _splits(n, k, block_n, block_k, sms):
                    for stages in (2, 4):
                        out.append(GemvConfig(block_n, block_k, split, warps, stages))
    return out


# -- the tuning file ------------------------------------------------------------------------
def default_tuning_file() -> Path:
    explicit = os.environ.get(TUNING_ENV)
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("EMBER_HOME")
    root = Path(home).expanduser() if home else Path(platformdirs.user_data_dir("ember"))
    return root / "cache" / "kernel-tuning.json"


def _config_from(raw: object) -> GemvConfig | None:
    names = {f.name for f in fields(GemvConfig)}
    if not isinstance(raw, dict) or set(raw) != names or \
            not all(isinstance(v, int) for v in raw.values()):
        return None
    try:
        return GemvConfig(**raw)
    except ValueError:
        return None


class TuningFile:
    """The sweep winners, read once and written whole (by rename, so a crash leaves the old
    file)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_tuning_file()
        self._entries: dict[str, GemvConfig] | None = None

    def entries(self) -> dict[str, GemvConfig]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> dict[str, GemvConfig]:
        if not self.path.exists():
            return {}
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            log.warning("ignoring the damaged kernel tuning file %s (%s)", self.path, e)
            return {}
        if not isinstance(doc, dict) or doc.get("version") != FILE_VERSION or \
                not isinstance(doc.get("gemv"), dict):
            log.warning("ignoring the kernel tuning file %s: not version %d with a 'gemv' "
                        "table", self.path, FILE_VERSION)
            return {}
        found = {}
        for key, raw in doc["gemv"].items():
            config = _config_from(raw)
            if config is None:
                log.warning("ignoring the bad entry %r in %s", key, self.path)
            else:
                found[key] = config
        return found

    def get(self, key: TuneKey) -> GemvConfig | None:
        return self.entries().get(key.text())

    def put(self, key: TuneKey, config: GemvConfig) -> None:
        self.entries()[key.text()] = config
        doc = {"version": FILE_VERSION,
               "gemv": {k: asdict(v) for k, v in sorted(self.entries().items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".kernel-tuning-", suffix=".json",
                                   dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
