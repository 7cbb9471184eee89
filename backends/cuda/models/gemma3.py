"""Gemma 3: five sliding-window layers to one global layer, each with its own rotary base;
norms before and after both attention and MLP; per-head q/k norms; embeddings scaled by
sqrt(hidden); GELU(tanh)-gated MLP. (1 + w) norms are folded into w by the loader.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from backends.cuda.context import Context
from backends.cuda.model_config import ModelConfig
from backends.cuda.models.layers import (
    Attention,
    CausalLM,
    GatedMLP,
    RMSNorm,
    Rotary,
    gelu_tanh,
)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, rotary: Rotary) -> None:
        super().__init__()
        eps, hidden = cfg.rms_norm_eps, cfg.hidden_size
        window = cfg.sliding_window if cfg.is_sliding(layer) else 0
        self.attn_norm = RMSNorm(hidden, eps)
        self.attn = Attention(hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.scale,
                              rotary, eps, qk_norm=True, sliding_window=window)
        self.post_attn_norm = RMSNorm(hidden, eps)
        self.ffn_norm = RMSNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, cfg.intermediate_size, gelu_tanh)
        self.post_ffn_norm = RMSNorm(hidden, eps)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, ctx: Context) -> torch.Tensor:
        x = x + self.post_attn_norm(self.attn(self.attn_norm(x), positions, ctx))
        return x + self.post_ffn_norm(self.mlp(self.ffn_norm(x)))


class Gemma3Model(CausalLM):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        # llama.cpp scales by sqrtf(n_embd) in fp32 (Hugging Face rounds it to the dtype)
        self.embed_scale = math.sqrt(cfg.hidden_size)
        local = Rotary(cfg.head_dim, cfg.rope_local_theta)
        glob = Rotary(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
        self.tok_embd = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, i, local if cfg.is_sliding(i) else glob)
            for i in range(cfg.num_layers))
        self.output_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output = None  # tied to the embedding
