"""Which llama.cpp CPU backend this process loads: the portable baseline or a faster variant.

Ember's llama.cpp is built with GGML_BACKEND_DL (packaging/llama_cpp_portable.sh): the CPU
backend is a module of its own, `libggml-cpu.so` in llama_cpp's lib folder, built for x86-64-v3
(AVX2, FMA, F16C, BMI2), which any x86 CPU since 2013-15 runs. Faster builds of that one
module (AVX-512) ship beside it; at start we pick the best one this CPU can run, and
backends.llamacpp.ggml_backends loads it in place of the baseline's, before llama.cpp starts.

Where the variants are (the bundle build must put them there):

    <llama_cpp package dir>/variants/<name>/libggml-cpu.so, variant.json
    <llama_cpp package dir>/variants/baseline.json   (the baseline's own requirements)

i.e. `_internal/llama_cpp/variants/` in a PyInstaller onedir bundle, beside
`_internal/llama_cpp/lib/` (the baseline). `variant.json` is {"name", "rank", "requires"}:
`requires` lists /proc/cpuinfo flag names (the baseline's included), a higher rank wins.
Ember's set-up on x86-64 Linux installs the same portable build with its variants
(packaging/install_llama_cpp.sh), so the tests run what a bundle runs; elsewhere a
development install has no variants folder and keeps its own (native) build.

Precedence: an explicit `LLAMA_CPP_LIB_PATH` in the environment (a llama.cpp of the user's
own) wins and its own CPU backend is used; then `EMBER_LLAMA_VARIANT=baseline|<name>` forces
one (an unknown name, or a CPU without its flags, is a clear error); then the best variant
whose flags the CPU has. Off Linux (no /proc/cpuinfo) the baseline is kept.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from backends.errors import EmberError

log = logging.getLogger(__name__)

LIB_PATH_ENV = "LLAMA_CPP_LIB_PATH"
FORCE_ENV = "EMBER_LLAMA_VARIANT"
BASELINE = "baseline"


class VariantError(EmberError):
    """A forced variant that does not exist or this CPU cannot run, or a CPU below the
    baseline, or a variants folder that does not read."""


@dataclass(frozen=True)
class Variant:
    name: str
    rank: int
    requires: frozenset[str]
    path: Path | None  # the variant's folder; None for the baseline (llama_cpp/lib)


CPU_MODULE = "libggml-cpu.so"


@dataclass(frozen=True)
class Choice:
    variant: Variant
    reason: str

    @property
    def library(self) -> Path | None:
        """The CPU backend module to load; None: the baseline in llama_cpp's lib folder."""
        return None if self.variant.path is None else self.variant.path / CPU_MODULE


chosen: Choice | None = None  # what this process's import of backends.llamacpp chose


def cpu_flags_from(cpuinfo: str) -> frozenset[str]:
    """The first processor's flags from /proc/cpuinfo text: the `flags` line on x86, the
    `Features` line on ARM."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_flags() -> frozenset[str] | None:
    """This CPU's flags, or None where they cannot be read (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return cpu_flags_from(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


def variants_dir() -> Path | None:
    """`<llama_cpp package dir>/variants`, found without importing llama_cpp."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "variants"


def _read_variant(path: Path, name: str, path_of_libs: Path | None) -> Variant:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise VariantError(f"llama.cpp variant description {path} does not read: {e}") from e
    requires = data.get("requires") if isinstance(data, dict) else None
    rank = data.get("rank", 0) if isinstance(data, dict) else None
    if not isinstance(requires, list) or not all(isinstance(f, str) for f in requires):
        raise VariantError(f"llama.cpp variant description {path}: 'requires' is not a list "
                           "of CPU flag names")
    if not isinstance(rank, int):
        raise VariantError(f"llama.cpp variant description {path}: 'rank' is not a number")
    return Variant(name, rank, frozenset(requires), path_of_libs)


def load_variants(folder: Path) -> tuple[Variant, list[Variant]]:
    """The baseline (from baseline.json) and the variants (each subfolder's variant.json)."""
    baseline = _read_variant(folder / f"{BASELINE}.json", BASELINE, None)
    variants = [_read_variant(sub / "variant.json", sub.name, sub)
                for sub in sorted(p for p in folder.iterdir() if p.is_dir())]
    return baseline, variants


def _missing(variant: Variant, flags: frozenset[str]) -> str:
    return " ".join(sorted(variant.requires - flags))


def choose(baseline: Variant, variants: Iterable[Variant], flags: frozenset[str] | None,
           forced: str | None = None) -> Choice:
    """The variant to load: `forced` if given (baseline or a variant's name), else the
    highest-ranked one whose required flags are all in `flags`, else the baseline."""
    by_name = {v.name: v for v in variants}
    if flags is not None and not baseline.requires <= flags:
        raise VariantError(
            f"this CPU lacks {_missing(baseline, flags)}, which Ember's llama.cpp needs "
            "(x86-64-v3: Intel Haswell / AMD Excavator or newer)")
    if forced is not None:
        if forced == BASELINE:
            return Choice(baseline, f"{FORCE_ENV}={forced}")
        if forced not in by_name:
            raise VariantError(f"{FORCE_ENV}={forced!r} is not a llama.cpp build shipped here; "
                               f"choose one of {', '.join([BASELINE, *sorted(by_name)])}")
        wanted = by_name[forced]
        if flags is not None and not wanted.requires <= flags:
            raise VariantError(f"{FORCE_ENV}={forced}: this CPU lacks {_missing(wanted, flags)}, "
                               f"which that build needs")
        return Choice(wanted, f"{FORCE_ENV}={forced}")
    if flags is None:
        return Choice(baseline, "CPU flags unknown on this system")
    runnable = [v for v in by_name.values() if v.requires <= flags]
    if not runnable:
        lacks = "; ".join(f"{v.name} needs {_missing(v, flags)}" for v in by_name.values())
        return Choice(baseline, f"no faster build fits this CPU ({lacks})" if lacks
                      else "no faster build shipped")
    best = max(runnable, key=lambda v: (v.rank, v.name))
    return Choice(best, f"the CPU has {' '.join(sorted(best.requires - baseline.requires))}")


def apply(environ: Mapping[str, str] = os.environ,
          folder: Path | None = None, flags: frozenset[str] | None = None) -> Choice | None:
    """Choose the CPU backend to load (before llama.cpp starts). None when nothing was
    chosen: the user set LLAMA_CPP_LIB_PATH, or no variants ship (a development install).
    `folder` and `flags` default to the installed variants and this CPU's flags."""
    if LIB_PATH_ENV in environ:
        log.info("llama.cpp libraries from %s=%s (set in the environment)",
                 LIB_PATH_ENV, environ[LIB_PATH_ENV])
        return None
    folder = folder if folder is not None else variants_dir()
    if folder is None or not (folder / f"{BASELINE}.json").is_file():
        log.debug("no llama.cpp CPU variants shipped; using llama_cpp's own lib folder")
        return None
    baseline, variants = load_variants(folder)
    choice = choose(baseline, variants, flags if flags is not None else cpu_flags(),
                    environ.get(FORCE_ENV) or None)
    if choice.library is not None and not choice.library.is_file():
        raise VariantError(f"llama.cpp variant {choice.variant.name} has no {CPU_MODULE} in "
                           f"{choice.variant.path}")
    log.info("llama.cpp CPU build: %s (%s)", choice.variant.name, choice.reason)
    return choice
