"""Which implementation a kernel call runs: Triton on CUDA tensors, the plain-torch reference
elsewhere. `EMBER_KERNELS=triton` forces Triton on any device (tests run it on the CPU under
TRITON_INTERPRET=1); `EMBER_KERNELS=torch` forces the reference on a GPU."""

from __future__ import annotations

import os

import torch

BACKENDS = ("triton", "torch")


def choose_backend(x: torch.Tensor, backend: str | None = None) -> str:
    backend = backend or os.environ.get("EMBER_KERNELS") or ("triton" if x.is_cuda else "torch")
    if backend not in BACKENDS:
        raise ValueError(f"unknown kernel backend {backend!r} (EMBER_KERNELS): use one of "
                         f"{', '.join(BACKENDS)}")
    return backend
