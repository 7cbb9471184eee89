"""`EMBER_GPU=off`: every backend runs on the CPU (llama.cpp loads no GPU backend, and the
hardware report lists no llama.cpp GPU). For a driver that misbehaves, or to compare."""

from __future__ import annotations

import os
from collections.abc import Mapping

GPU_ENV = "EMBER_GPU"
OFF_VALUES = ("off", "0", "false", "no", "cpu")


def gpu_allowed(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(GPU_ENV, "").strip().lower() not in OFF_VALUES
