"""FP8 weights (kernels.quant.Fp8Weight, kernels.fp8): rounding bounds, the reference matmul,
torch's `_scaled_mm` path (which runs on the CPU too), the loader, and the GPU check."""

from __future__ import annotations

import pytest
import torch

from backends.cuda.loader import load_weights
from backends.errors import InvalidRequestError
from kernels.fp8 import fp8_linear, fp8_reference, fp8_supported, quantize_activations
from kernels.matmul import linear
from kernels.quant import FP8_MAX, Fp8Weight, quantize
from tests.unit.test_kernels import tiny_llama_gguf


def test_fp8_per_channel_rounding_stays_within_half_an_e4m3_step():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(96, 200, generator=g) * torch.logspace(-3, 1, 96)[:, None]
    w[5] = 0.0  # an all-zero row keeps scale 0
    q = quantize(w, "fp8")
    assert isinstance(q, Fp8Weight) and q.qweight.dtype == torch.float8_e4m3fn
    assert q.scales.shape == (1, 96) and q.scales.dtype == torch.float32
    assert q.group_size == 200 and q.shape == (96, 200)
    back = q.dequantize()
    assert torch.equal(back[5], torch.zeros(200))
    # e4m3 keeps 3 mantissa bits: a relative error of at most 2**-4 for normal values, and
    # absolute steps of 2**-9 * scale below 2**-6 (the subnormals)
    err = (back - w).abs()
    bound = torch.maximum(w.abs() * 2.0 ** -4, 2.0 ** -10 * q.scales.t())
    assert (err <= bound * 1.0001).all()
    assert torch.allclose(back.abs().amax(-1), w.abs().amax(-1), rtol=1e-6)  # max kept


def test_fp8_refuses_groups():
    with pytest.raises(ValueError, match="one scale per output channel"):
        quantize(torch.randn(8, 64), "fp8", 32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 17])
def test_fp8_linear_is_the_dequantized_matmul(rows, dtype):
    g = torch.Generator().manual_seed(1)
    w = quantize(torch.randn(48, 64, generator=g) * 0.1, "fp8")
    x = torch.randn(rows, 64, generator=g).to(dtype)
    want = (x.float() @ w.dequantize().t()).to(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(fp8_reference(x, w), want, **tol)
    bias = torch.randn(48, generator=g).to(dtype)
    torch.testing.assert_close(linear(x, w, bias), want + bias, **tol)  # the dispatch


@pytest.mark.parametrize("rowwise", [True, False])
def test_scaled_mm_path_matches_the_reference_within_activation_rounding(rowwise):
    """The GPU's path, run by torch on the CPU: activations quantized per token (Hopper) or
    per tensor (Ada) add at most e4m3's relative step on each input."""
    g = torch.Generator().manual_seed(2)
    w = quantize(torch.randn(64, 128, generator=g) * 0.05, "fp8")
    x = torch.randn(20, 128, generator=g)
    x[3] *= 50  # one loud token: per tensor it coarsens the others' steps
    from kernels.fp8 import fp8_scaled_mm
    got = fp8_scaled_mm(x, w, rowwise)
    xq, sx = quantize_activations(x, per_token=rowwise)
    emulated = (xq.float() * sx) @ w.dequantize().t()
    # row-wise scaling writes bfloat16 (cuBLASLt's constraint): one bf16 rounding more
    tol = 2.0 ** -8 if rowwise else 1e-5
    torch.testing.assert_close(got, emulated, rtol=tol, atol=1e-4)
    # against the unquantized activations: the error is the activations' rounding alone
    ref = fp8_reference(x, w)
    bound = (x - xq.float() * sx).abs() @ w.dequantize().abs().t()
    assert ((got - ref).abs() <= bound * 1.001 + tol * ref.abs() + 1e-4).all()
    if rowwise:  # what fp8_linear picks for a CPU tensor (row-wise scales run there)
        assert torch.equal(fp8_linear(x, w, path="scaled_mm"), got)


def test_activation_quantization_uses_the_whole_e4m3_range():
    x = torch.tensor([[1.0, -3.0, 0.5], [0.0, 0.0, 0.0]])
    xq, s = quantize_activations(x, per_token=True)
    assert xq.float()[0].abs().max() == FP8_MAX and s[1, 0] > 0  # a zero row: no division by 0
    assert torch.equal(xq.float()[1], torch.zeros(3))


@pytest.mark.parametrize(("capability", "ok"), [((7, 5), False), ((8, 0), False),
                                                ((8, 6), False), ((8, 9), True),
                                                ((9, 0), True), ((10, 0), True)])
def test_fp8_needs_compute_capability_8_9(capability, ok):
    assert fp8_supported(capability) is ok


def test_loader_packs_fp8_and_refuses_a_gpu_without_fp8(tmp_path, monkeypatch):
    path, _ = tiny_llama_gguf(tmp_path / "tiny.gguf")
    f32 = load_weights(path).tensors
    fp8 = load_weights(path, quant="fp8").tensors
    for name in ("layers.0.attn.q.weight", "layers.0.mlp.down.weight", "output.weight"):
        w = fp8[name]
        assert isinstance(w, Fp8Weight)
        err = (w.dequantize() - f32[name]).abs()
        assert (err <= f32[name].abs() * 2.0 ** -4 + 2.0 ** -10 * w.scales.t()).all()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "RTX 3090")
    with pytest.raises(InvalidRequestError, match="RTX 3090 is 8.6: use int8"):
        load_weights(path, device="cuda", quant="fp8")
