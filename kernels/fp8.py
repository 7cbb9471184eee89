"""FP8 weight matmul: y = x @ W^T for an `Fp8Weight` (kernels.quant), through
`torch._scaled_mm` (cuBLASLt's FP8 GEMM) on GPUs with FP8 tensor cores (compute capability
8.9: Ada; 9.0: Hopper) for batches above FP8_MIN_ROWS, the dequantizing reference elsewhere.

Activations are quantized on the fly, as vLLM's fp8 W8A8 path does (its
`scaled_fp8_quant` / `apply_fp8_linear`): per token (one scale per row, absmax / 448) where
cuBLASLt takes row-wise scales (Hopper), per tensor on Ada, whose `_scaled_mm` takes only
scalar scales; there the weight's per-channel scales multiply the output afterwards.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.quant import FP8_MAX, Fp8Weight

FP8_CAPABILITY = (8, 9)  # the first with FP8 tensor cores (Ada); Hopper is 9.0
ROWWISE_CAPABILITY = (9, 0)  # cuBLASLt's row-wise (per-token, per-channel) scaling
# up to this many rows the reference runs (decode); a GEMV that reads FP8 in registers is the
# GEMV kernel's job (issue 44), not cuBLASLt's
FP8_MIN_ROWS = 16


def fp8_supported(capability: tuple[int, int]) -> bool:
    """Whether a GPU of this compute capability (torch.cuda.get_device_capability) has FP8."""
    return tuple(capability) >= FP8_CAPABILITY


def check_fp8_device(device: torch.device | str) -> None:
    """A clear error where FP8 weights cannot run fast: a CUDA GPU older than Ada. (The CPU
    runs the reference, as it does for int8 and int4.)"""
    device = torch.device(device)
    if device.type != "cuda":
        return
    cap = torch.cuda.get_device_capability(device)
    if not fp8_supported(cap):
        raise ValueError(f"fp8 weights need an NVIDIA GPU of compute capability "
                         f"{FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]} or newer (Ada, Hopper); "
                         f"{torch.cuda.get_device_name(device)} is {cap[0]}.{cap[1]}: use "
                         f"int8")


def fp8_reference(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """x (..., K) @ W^T in x's dtype: the weight cast up, its scales after the matmul."""
    return F.linear(x, w.qweight.to(x.dtype)) * w.scales[0].to(x.dtype)


def quantize_activations(x: torch.Tensor, per_token: bool
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) -> (float8_e4m3fn (M, K), float32 scales (M, 1) or a scalar)."""
    xf = x.float()
    amax = xf.abs().amax(-1, keepdim=True) if per_token else xf.abs().amax()
    scale = (amax / FP8_MAX).clamp_min(1e-12)
    return (xf / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


def fp8_scaled_mm(x: torch.Tensor, w: Fp8Weight, rowwise: bool) -> torch.Tensor:
    """x (M, K) contiguous -> (M, N) in x's dtype through `torch._scaled_mm`."""
    xq, sx = quantize_activations(x, per_token=rowwise)
    wt = w.qweight.t()  # (K, N) column-major, as cuBLASLt wants the second operand
    if rowwise:
        y = torch._scaled_mm(xq, wt, scale_a=sx, scale_b=w.scales.float(),
                             out_dtype=torch.bfloat16)
        return y.to(x.dtype)
    one = torch.ones((), device=x.device, dtype=torch.float32)
    y = torch._scaled_mm(xq, wt, scale_a=sx, scale_b=one, out_dtype=torch.float32)
    return (y * w.scales.float()).to(x.dtype)


def fp8_linear(x: torch.Tensor, w: Fp8Weight, path: str | None = None) -> torch.Tensor:
    """y = x @ W^T for x (..., K). `path`: "scaled_mm" or "reference" (None: scaled_mm on an
    FP8 GPU above FP8_MIN_ROWS rows, else the reference)."""
    rows = x.reshape(-1, x.shape[-1])
    if path is None:
        path = "scaled_mm" if (x.is_cuda and rows.shape[0] > FP8_MIN_ROWS and
                               fp8_supported(torch.cuda.get_device_capability(x.device))
                               ) else "reference"
    if path == "reference":
        return fp8_reference(x, w)
    if path != "scaled_mm":
        raise ValueError(f"unknown fp8 path {path!r}: use scaled_mm or reference")
    rowwise = not x.is_cuda or \
        tuple(torch.cuda.get_device_capability(x.device)) >= ROWWISE_CAPABILITY
    y = fp8_scaled_mm(rows.contiguous(), w, rowwise)
    return y.view(*x.shape[:-1], -1)
