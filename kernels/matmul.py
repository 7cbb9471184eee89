"""The one entry point for packed (int8/int4/fp8) linear layers: `linear(x, w, bias)`.

Triton on CUDA tensors: kernels.gemv_triton for 1-16 rows (decode, verification),
kernels.matmul_triton's GEMM tiling above; elsewhere the plain-torch reference below,
which is also what the Triton kernel is tested against (kernels.dispatch says which).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import choose_backend
from kernels.gemv_config import MAX_ROWS as GEMV_MAX_ROWS
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
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        if 1 <= rows.shape[0] <= GEMV_MAX_ROWS:
            from kernels.gemv_triton import gemv

            y = gemv(rows, w).view(*x.shape[:-1], -1)
        else:
            from kernels.matmul_triton import matmul

            y = matmul(rows, w).view(*x.shape[:-1], -1)
    else:
        y = linear_reference(x, w)
    return y if bias is None else y + bias
