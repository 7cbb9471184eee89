"""The numbers that shape a model, read from GGUF metadata or a Hugging Face config.json."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Architectures the engine runs, by their GGUF name; Hugging Face names map onto these.
LLAMA_FAMILY = ("llama", "qwen2", "qwen3", "mistral")
SUPPORTED = (*LLAMA_FAMILY, "gemma3")
HF_ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Gemma3ForCausalLM": "gemma3",
}


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position: int
    tie_embeddings: bool = False
    qkv_bias: bool = False  # qwen2
    qk_norm: bool = False  # qwen3, gemma3: RMSNorm over each head of q and k
    # gemma3
    rope_local_theta: float = 10000.0
    sliding_window: int = 0  # 0: every layer is global
    sliding_pattern: int = 0  # every n-th layer is global, the others slide
    attn_scale: float | None = None  # None: 1/sqrt(head_dim)
    rope_scaling: float = 1.0  # linear factor on global layers (gemma3 >= 1B)
    # Llama 3.1+: per-frequency divisors of the rotary frequencies ("llama3" rope scaling;
    # GGUF stores them as the rope_freqs tensor)
    rope_freq_factors: tuple[float, ...] | None = None

    def is_sliding(self, layer: int) -> bool:
        # llama.cpp's set_swa_pattern: the last layer of each group of `sliding_pattern` is global
        return bool(self.sliding_window and self.sliding_pattern
                    and layer % self.sliding_pattern < self.sliding_pattern - 1)

    @property
    def scale(self) -> float:
        return self.attn_scale if self.attn_scale is not None else self.head_dim ** -0.5


def llama3_freq_factors(head_dim: int, theta: float, scaling: dict) -> tuple[float, ...]:
    """Hugging Face's "llama3" rope scaling as divisors of each rotary frequency (what
    llama.cpp's converter writes to rope_freqs): high frequencies kept, low ones divided by
    `factor`, a smooth blend between."""
    factor = scaling["factor"]
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_ctx = scaling.get("original_max_position_embeddings", 8192)
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / theta ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return tuple(out)
