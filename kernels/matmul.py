"""The one entry point for packed (int8/int4/fp8) linear layers: `linear(x, w, bias)`.

Triton (kernels.matmul_triton) on CUDA tensors; elsewhere the plain-torch reference below,
which is also what the Triton kernel is tested against (kernels.dispatch says which).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import choose_backend
from kernels.quant import Fp8Weight, Int8Weight, PackedWeight


def linear_reference(x: torch.Tensor, w: PackedWeight) -> torch.Tensor:
    """x (..., K) @ W^T in x's dtype. Per-channel int8 is gpt-fast's form (the scale after the
    matmul); every other layout dequantizes the whole weight first."""
    if isinstance(w, Int8Weight) and w.scales.shape[0] == 1:
        return F.linear(x, w.qweight.to(x.dtype)) * w.scales[0].to(x.dtype)
    return F.linear(x, w.dequantize(x.dtype))


def linear(x: torch.Tensor, w: PackedWeight, bias: torch.Tensor | None = None,
           backend: str | None = None) -> torch.Tensor:
    """y = x @ W^T (+ bias) for x (..., K); the dispatch point described above."""
    if x.shape[-1] != w.shape[1]:
        raise ValueError(f"input has {x.shape[-1]} features, the weight expects {w.shape[1]}")
    if isinstance(w, Fp8Weight):  # cuBLASLt's FP8 GEMM or its reference (kernels.fp8)
        from kernels.fp8 import fp8_linear

        y = fp8_linear(x, w)
    elif choose_backend(x, backend) == "triton":
        from kernels.matmul_triton import matmul

        y = matmul(x.reshape(-1, x.shape[-1]).contiguous(), w).view(*x.shape[:-1], -1)
    else:
        y = linear_reference(x, w)
    return y if bias is None else y + bias
