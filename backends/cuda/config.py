"""The numbers that shape a model, read from GGUF metadata or a Hugging Face config.json."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    extra: dict = field(default_factory=dict)

    def is_sliding(self, layer: int) -> bool:
        # llama.cpp's set_swa_pattern: the last layer of each group of `sliding_pattern` is global
        return bool(self.sliding_window and self.sliding_pattern
                    and layer % self.sliding_pattern < self.sliding_pattern - 1)

    @property
    def scale(self) -> float:
        return self.attn_scale if self.attn_scale is not None else self.head_dim ** -0.5
