"""FP8 weights on an NVIDIA GPU: torch._scaled_mm (cuBLASLt) against the dequantizing
reference and the activation-rounding emulation the CPU tier checks (tests/unit/test_fp8.py),
on Llama-3-8B's projection shapes; and the refusal on GPUs without FP8.

Collected only on a machine with an NVIDIA GPU (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from backends.cuda.loader import pack_linears
from kernels.fp8 import (
    ROWWISE_CAPABILITY,
    check_fp8_device,
    fp8_linear,
    fp8_reference,
    fp8_supported,
    quantize_activations,
)
from kernels.quant import quantize

if not torch.cuda.is_available():
    raise RuntimeError("tests/gpu needs a CUDA device")

CUDA = torch.device("cuda")
CAPABILITY = torch.cuda.get_device_capability()
needs_fp8 = pytest.mark.skipif(not fp8_supported(CAPABILITY),
                               reason="this GPU has no FP8 (the refusal test covers it)")


@needs_fp8
@pytest.mark.parametrize("rows", [1, 17, 64])
@pytest.mark.parametrize(("n", "k"), [(6144, 4096), (4096, 4096), (28672, 4096),
                                      (4096, 14336), (1000, 4096)])
def test_scaled_mm_matches_the_emulated_fp8_product(rows, n, k):
    g = torch.Generator(device=CUDA).manual_seed(0)
    w = quantize(torch.randn(n, k, device=CUDA, generator=g) * 0.02, "fp8")
    x = torch.randn(rows, k, device=CUDA, generator=g).to(torch.bfloat16)
    got = fp8_linear(x, w, path="scaled_mm")
    assert got.dtype == torch.bfloat16 and got.shape == (rows, n)
    rowwise = CAPABILITY >= ROWWISE_CAPABILITY
    xq, sx = quantize_activations(x, per_token=rowwise)
    emulated = (xq.float() * sx) @ w.dequantize().t()
    torch.testing.assert_close(got.float(), emulated, rtol=2e-2, atol=2e-2)
    ref = fp8_reference(x, w).float()
    rel = (got.float() - ref).norm() / ref.norm()
    assert rel < 0.05  # e4m3 activations: ~2-3% relative on random data


@needs_fp8
def test_packed_fp8_model_dispatches_scaled_mm_above_16_rows():
    tensors = {"layers.0.mlp.down.weight": torch.randn(256, 512, device=CUDA) * 0.02}
    w = pack_linears(tensors, "fp8")["layers.0.mlp.down.weight"]
    x = torch.randn(32, 512, device=CUDA, dtype=torch.bfloat16)
    assert torch.equal(fp8_linear(x, w), fp8_linear(x, w, path="scaled_mm"))
    assert torch.equal(fp8_linear(x[:16], w), fp8_reference(x[:16], w))


def test_fp8_is_refused_exactly_on_gpus_without_it():
    if fp8_supported(CAPABILITY):
        check_fp8_device(CUDA)  # no error
    else:
        with pytest.raises(ValueError, match="compute capability 8.9"):
            check_fp8_device(CUDA)
