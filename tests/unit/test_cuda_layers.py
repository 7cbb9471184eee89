"""The cuda engine's shared layers: the rotary embedding, computed once per forward pass and
applied to q and k together, is bit-identical to rotating each half-pair on its own (the
form Hugging Face and the engine's llama.cpp agreement tests were calibrated on)."""

from __future__ import annotations

import pytest
import torch

from backends.cuda.models.layers import Rotary


def rotate_reference(x: torch.Tensor, positions: torch.Tensor, rotary: Rotary) -> torch.Tensor:
    freqs = positions.float()[:, None] * rotary.inv_freq[None, :]
    cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotating_q_and_k_together_equals_rotating_each_half_pair(dtype):
    g = torch.Generator().manual_seed(0)
    rotary = Rotary(64, 500000.0, freq_factors=tuple(1.0 + i / 32 for i in range(32)))
    positions = torch.tensor([0, 1, 7, 300, 4095])
    q = torch.randn(5, 8, 64, generator=g).to(dtype)
    k = torch.randn(5, 2, 64, generator=g).to(dtype)
    rotary.prepare(positions)
    rq, rk = rotary(positions, q, k)
    assert torch.equal(rq, rotate_reference(q, positions, rotary))
    assert torch.equal(rk, rotate_reference(k, positions, rotary))


def test_new_positions_get_their_own_cos_and_sin():
    """The rows prepared for one pass are never reused for other positions (each forward
    pass prepares its own; a call with other positions computes them)."""
    rotary = Rotary(16, 10000.0)
    q, k = torch.ones(2, 1, 16), torch.ones(2, 1, 16)
    rotary.prepare(torch.tensor([0, 1]))
    later = torch.tensor([5, 9])
    rq, _ = rotary(later, q, k)
    assert torch.equal(rq, rotate_reference(q, later, rotary))
