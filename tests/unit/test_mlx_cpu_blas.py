"""backends/mlx_blas.py: MLX's float32 products go to the system OpenBLAS once it is
opened before MLX is imported, and to the reference BLAS of the mlx[cpu] wheel with
EMBER_MLX_OPENBLAS=0. Checked in the dynamic linker's own record of the binding (LD_DEBUG),
in a fresh process, as the mlx worker is."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import REPO

PRODUCT = """
from backends.mlx_blas import use_openblas
print("opened:", use_openblas())
import mlx.core as mx
x = mx.ones((64, 64))
mx.eval(x @ x)
"""


def sgemm_binding(**env: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", PRODUCT], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "LD_DEBUG": "bindings",
                                                       **env})
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stderr.splitlines()
                if "libmlx.so" in line and "`cblas_sgemm'" in line)
    return done.stdout.strip(), line.split(" to ", 1)[1]


def test_mlx_multiplies_with_the_system_openblas():
    opened, target = sgemm_binding()
    assert opened == "opened: libopenblas.so.0"
    assert "libopenblas.so.0" in target, target


def test_turned_off_mlx_keeps_the_reference_blas_of_its_wheel():
    opened, target = sgemm_binding(EMBER_MLX_OPENBLAS="0")
    assert opened == "opened: None"
    assert "mlx_cpu.libs/libblas" in target, target
