"""The llama family: Llama 3, Mistral, Qwen2/2.5 (q/k/v bias) and Qwen3 (q/k norms).

Pre-norm decoder layers: x + attn(norm(x)), then x + mlp(norm(x)), SiLU-gated MLP.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backends.cuda.context import Context
from backends.cuda.model_config import ModelConfig
from backends.cuda.models.layers import Attention, CausalLM, GatedMLP, RMSNorm, Rotary


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, rotary: Rotary) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                              cfg.scale, rotary, cfg.rms_norm_eps, bias=cfg.qkv_bias,
                              qk_norm=cfg.qk_norm)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, F.silu)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, ctx: Context) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), positions, ctx)
        return x + self.mlp(self.ffn_norm(x))


class LlamaModel(CausalLM):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        rotary = Rotary(cfg.head_dim, cfg.rope_theta, freq_factors=cfg.rope_freq_factors)
        self.tok_embd = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, rotary) for _ in range(cfg.num_layers))
        self.output_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output = (None if cfg.tie_embeddings
                       else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False))
