"""Fused q/k/v and gate/up projections (backends/cuda/fuse.py, kernels.quant.concat_outputs):
the fused layer computes exactly what the separate projections did, in every layout."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backends.cuda.fuse import fuse_projections
from backends.cuda.loader import pack_linears
from backends.cuda.model_config import ModelConfig
from backends.cuda.models import build_model
from backends.errors import ModelFileError
from kernels.matmul import linear
from kernels.quant import Int4Weight, Int8Weight, concat_outputs, quantize

# Qwen2's shape in small: q/k/v biases, GQA (4 heads over 2 kv heads), K = 256 (two int4 groups)
TINY = ModelConfig("qwen2", 300, 256, 2, 4, 2, 64, 384, 1e-6, 1e6, 512, tie_embeddings=True,
                   qkv_bias=True)


def separate_tensors(cfg: ModelConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random state dict under the loader's (unfused) names."""
    g = torch.Generator().manual_seed(seed)
    h, d, i = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    q, kv = cfg.num_heads * d, cfg.num_kv_heads * d
    out = {"tok_embd.weight": torch.randn(cfg.vocab_size, h, generator=g) * 0.3,
           "output_norm.weight": torch.ones(h)}
    for n in range(cfg.num_layers):
        p = f"layers.{n}."
        shapes = {"attn.q.weight": (q, h), "attn.k.weight": (kv, h), "attn.v.weight": (kv, h),
                  "attn.q.bias": (q,), "attn.k.bias": (kv,), "attn.v.bias": (kv,),
                  "attn.o.weight": (h, q), "mlp.gate.weight": (i, h), "mlp.up.weight": (i, h),
                  "mlp.down.weight": (h, i)}
        out |= {p + k: torch.randn(s, generator=g) * 0.3 for k, s in shapes.items()}
        out |= {p + "attn_norm.weight": torch.ones(h), p + "ffn_norm.weight": torch.ones(h)}
    return out


@pytest.mark.parametrize("quant", [None, "int8", "int4", "fp8"])
def test_fused_projections_give_each_separate_projection_as_a_view(quant):
    tensors = separate_tensors(TINY)
    packed = pack_linears(tensors, quant) if quant else dict(tensors)
    model = build_model(TINY)
    model.load_weights(packed)
    attn, mlp = model.layers[1].attn, model.layers[1].mlp
    x = torch.randn(5, TINY.hidden_size)
    d = TINY.head_dim
    q, k, v = attn.qkv(x).split([4 * d, 2 * d, 2 * d], dim=-1)

    def separate(name: str, bias: bool = True) -> torch.Tensor:
        w = packed[f"layers.1.{name}.weight"]
        b = tensors[f"layers.1.{name}.bias"] if bias else None
        return F.linear(x, w, b) if quant is None else linear(x, w, b)

    for got, name in ((q, "attn.q"), (k, "attn.k"), (v, "attn.v")):
        torch.testing.assert_close(got, separate(name), rtol=1e-5, atol=1e-5)
    gate, up = mlp.gate_up(x).chunk(2, dim=-1)
    torch.testing.assert_close(gate, separate("mlp.gate", bias=False), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(up, separate("mlp.up", bias=False), rtol=1e-5, atol=1e-5)
    if quant is not None:
        assert type(attn.qkv).__name__ == type(mlp.gate_up).__name__ == "QuantLinear"


def test_int8_parts_with_different_groups_meet_at_the_smaller_group_exactly():
    g = torch.Generator().manual_seed(1)
    w32 = quantize(torch.randn(64, 128, generator=g), "int8", 32)  # a Q8_0 tensor's blocks
    per_channel = quantize(torch.randn(32, 128, generator=g), "int8")  # group 128
    fused = concat_outputs([w32, per_channel])
    assert isinstance(fused, Int8Weight) and fused.group_size == 32
    assert fused.shape == (96, 128)
    assert torch.equal(fused.dequantize(), torch.cat([w32.dequantize(),
                                                      per_channel.dequantize()]))


def test_int4_parts_concatenate_along_n_in_words_scales_and_zeros():
    g = torch.Generator().manual_seed(2)
    parts = [quantize(torch.randn(n, 256, generator=g), "int4") for n in (48, 16, 16)]
    fused = concat_outputs(parts)
    assert isinstance(fused, Int4Weight) and fused.qweight.shape == (32, 80)
    assert torch.equal(fused.dequantize(), torch.cat([p.dequantize() for p in parts]))


def test_fusing_refuses_mixed_layouts_and_groups_that_do_not_divide():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(16, 96, generator=g)
    with pytest.raises(ValueError, match="different layouts"):
        concat_outputs([quantize(w, "int8"), quantize(w, "fp8")])
    with pytest.raises(ValueError, match="none divides"):
        concat_outputs([quantize(w, "int8", 32), quantize(w, "int8", 48)])
    tensors = separate_tensors(TINY)
    tensors["layers.0.attn.v.weight"] = quantize(tensors["layers.0.attn.v.weight"], "int8")
    with pytest.raises(ModelFileError, match="layers.0.attn.qkv.weight: some are packed"):
        fuse_projections(tensors)
    del tensors["layers.0.attn.v.weight"]
    with pytest.raises(ModelFileError, match="no partner"):
        fuse_projections(tensors)


def test_a_fused_state_dict_loads_again_unchanged():
    """The benchmark packs a loaded model's own (fused) state dict: names pass through, and
    int8's per-output-channel scales make packing the fused weight the same as fusing the
    packed parts (each output row is quantized on its own)."""
    model = build_model(TINY)
    model.load_weights(separate_tensors(TINY))
    again = build_model(TINY)
    again.load_weights(pack_linears(dict(model.state_dict()), "int8"))
    packed_first = build_model(TINY)
    packed_first.load_weights(pack_linears(separate_tensors(TINY), "int8"))
    x = torch.randn(3, TINY.hidden_size, generator=torch.Generator().manual_seed(0))
    for module in ("attn.qkv", "mlp.gate_up"):
        fused_then_packed = again.layers[0].get_submodule(module)(x)
        torch.testing.assert_close(fused_then_packed,
                                   packed_first.layers[0].get_submodule(module)(x))
        # and int8's rounding only: within a few percent of the float projection's scale
        float_out = model.layers[0].get_submodule(module)(x)
        assert (fused_then_packed - float_out).abs().max() < 0.05 * float_out.abs().max()
