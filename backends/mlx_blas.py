"""OpenBLAS under mlx[cpu] on Linux, in place of the reference BLAS its wheel ships.

The `mlx[cpu]` wheel for Linux links netlib's reference BLAS (`mlx_cpu.libs/libblas-*.so`,
plain Fortran loops): a float32 8x896 by 896x4864 product took 49 ms with it and 4.1 ms with
Debian's OpenBLAS (AMD EPYC, 2 cores; docs/notes/mlx-on-cpu.md). mlx's quantized matmul does
not use BLAS and is slower still on the CPU, so with OpenBLAS at hand the backend unpacks a
quantized model's weights to float32 where they fit (app.fit.mlx, `LoadPlan.unpack_weights`).

How: the system's OpenBLAS (`libopenblas.so.0`, Debian's libopenblas0-pthread) is opened
with RTLD_GLOBAL before MLX is first imported. A library opened later (mlx's core module,
then libmlx.so) looks a symbol up in the global scope before its own dependencies, so
libmlx's `cblas_sgemm` binds to OpenBLAS. Too late once `mlx.core` is imported; the mlx
worker imports backends.mlx.backend, which calls `use_openblas()` first.
`EMBER_MLX_OPENBLAS=0` keeps the reference BLAS (for a side-by-side measurement).

A module of its own, outside backends/mlx: the fit model asks `openblas_library()` without
MLX, and the Linux bundle leaves the backends.mlx package out.

OpenBLAS in the global scope also serves any library opened after it that calls BLAS: torch
imported later bound its `sgemm_` to OpenBLAS instead of its own MKL (and its results moved).
The mlx worker runs no torch; a process that runs both imports torch first (tests/conftest.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

ENV = "EMBER_MLX_OPENBLAS"

_loaded: str | None = None


def openblas_library() -> str | None:
    """The system OpenBLAS the mlx backend would use here: its library name, else None
    (not Linux, none installed, or turned off with EMBER_MLX_OPENBLAS=0)."""
    if not sys.platform.startswith("linux") or os.environ.get(ENV, "1") == "0":
        return None
    return ctypes.util.find_library("openblas")


def use_openblas() -> str | None:
    """Open the system OpenBLAS for MLX to bind to (once per process); its name, or None
    where there is none or MLX was imported already (then its own BLAS stays)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    name = openblas_library()
    if name is None or "mlx.core" in sys.modules:
        return None
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    _loaded = name
    return name
