"""Hugging Face safetensors folders load under the engine's names, with Gemma's (1 + w)
norms folded in and no Q/K permutation (that is llama.cpp's, for GGUF only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from backends.cuda.context import Context
from backends.cuda.loader import load_weights
from backends.cuda.model_config import llama3_freq_factors
from backends.cuda.models import build_model
from backends.errors import ModelFileError

TINY = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=48, rms_norm_eps=1e-6,
            max_position_embeddings=128)


def hf_checkpoint(folder: Path, arch: str, **extra) -> dict[str, torch.Tensor]:
    cfg = TINY | {"architectures": [arch]} | extra
    head_dim = cfg.get("head_dim", 8)
    h, q, kv, inter = 32, 4 * head_dim, 2 * head_dim, 48
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.1

    tensors = {"model.embed_tokens.weight": rand(64, h), "model.norm.weight": rand(h)}
    for i in range(2):
        p = f"model.layers.{i}."
        tensors |= {p + "self_attn.q_proj.weight": rand(q, h),
                    p + "self_attn.k_proj.weight": rand(kv, h),
                    p + "self_attn.v_proj.weight": rand(kv, h),
                    p + "self_attn.o_proj.weight": rand(h, q),
                    p + "mlp.gate_proj.weight": rand(inter, h),
                    p + "mlp.up_proj.weight": rand(inter, h),
                    p + "mlp.down_proj.weight": rand(h, inter),
                    p + "input_layernorm.weight": rand(h),
                    p + "post_attention_layernorm.weight": rand(h)}
        if arch == "Qwen2ForCausalLM":
            tensors |= {p + "self_attn.q_proj.bias": rand(q), p + "self_attn.k_proj.bias":
                        rand(kv), p + "self_attn.v_proj.bias": rand(kv)}
        if arch == "Gemma3ForCausalLM":
            tensors |= {p + "self_attn.q_norm.weight": rand(head_dim),
                        p + "self_attn.k_norm.weight": rand(head_dim),
                        p + "pre_feedforward_layernorm.weight": rand(h),
                        p + "post_feedforward_layernorm.weight": rand(h)}
    if not cfg.get("tie_word_embeddings", arch == "Gemma3ForCausalLM"):
        tensors["lm_head.weight"] = rand(64, h)
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(tensors, str(folder / "model.safetensors"))
    return tensors


def logits_of(folder: Path, tokens: list[int]) -> torch.Tensor:
    weights = load_weights(folder)
    model = build_model(weights.config)
    model.load_weights(weights.tensors)
    cfg, n = weights.config, len(tokens)
    for attn in model.attention_layers():
        attn.k_cache = torch.zeros(16, cfg.num_kv_heads, cfg.head_dim)
        attn.v_cache = torch.zeros(16, cfg.num_kv_heads, cfg.head_dim)
    ctx = Context(torch.arange(n), torch.zeros(1, 1, dtype=torch.long), torch.tensor([n]),
                  [n], [n])
    with torch.inference_mode():
        return model.logits(model(torch.tensor(tokens), torch.arange(n), ctx))


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Qwen2ForCausalLM"])
def test_llama_family_checkpoint_loads_unpermuted_with_every_tensor(tmp_path, arch):
    saved = hf_checkpoint(tmp_path / "m", arch)
    weights = load_weights(tmp_path / "m")
    assert weights.config.qkv_bias == (arch == "Qwen2ForCausalLM")
    assert torch.equal(weights.tensors["layers.1.attn.q.weight"],
                       saved["model.layers.1.self_attn.q_proj.weight"])
    assert torch.equal(weights.tensors["layers.0.ffn_norm.weight"],
                       saved["model.layers.0.post_attention_layernorm.weight"])
    assert len(weights.tensors) == len(saved)
    assert logits_of(tmp_path / "m", [1, 5, 9]).shape == (3, 64)


def test_gemma3_checkpoint_folds_one_into_every_norm(tmp_path):
    saved = hf_checkpoint(tmp_path / "g", "Gemma3ForCausalLM", head_dim=8,
                          query_pre_attn_scalar=8, sliding_window=4)
    weights = load_weights(tmp_path / "g")
    assert weights.config.tie_embeddings and weights.config.sliding_window == 4
    for ours, theirs in [("layers.0.post_attn_norm.weight",
                          "model.layers.0.post_attention_layernorm.weight"),
                         ("layers.1.attn.q_norm.weight", "model.layers.1.self_attn.q_norm.weight"),
                         ("output_norm.weight", "model.norm.weight")]:
        assert torch.allclose(weights.tensors[ours], saved[theirs] + 1.0)
    assert torch.isfinite(logits_of(tmp_path / "g", [2, 3, 4, 5, 6, 7])).all()


def test_a_folder_without_weights_or_with_an_unknown_architecture_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFileError, match="config.json and"):
        load_weights(tmp_path / "empty")
    hf_checkpoint(tmp_path / "bert", "BertModel")
    with pytest.raises(ModelFileError, match="not supported by the cuda backend"):
        load_weights(tmp_path / "bert")


def test_llama3_rope_scaling_divides_only_the_low_frequencies(tmp_path):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    hf_checkpoint(tmp_path / "l", "LlamaForCausalLM", rope_theta=500000.0,
                  rope_scaling=scaling)
    factors = load_weights(tmp_path / "l").config.rope_freq_factors
    assert factors is not None and len(factors) == 4  # head_dim 8
    factors = llama3_freq_factors(128, 500000.0, scaling)  # Llama 3.1 8B's numbers
    assert factors[0] == 1.0 and factors[-1] == 8.0
    assert all(a <= b for a, b in zip(factors, factors[1:], strict=False))
    assert any(1.0 < f < 8.0 for f in factors)  # the smooth band
