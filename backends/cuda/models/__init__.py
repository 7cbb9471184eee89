"""One file per architecture on shared layers; `build_model` picks the class."""

from __future__ import annotations

from backends.cuda.model_config import LLAMA_FAMILY, ModelConfig
from backends.cuda.models.layers import CausalLM


def build_model(cfg: ModelConfig, meta: bool = True) -> CausalLM:
    """The model with parameters on the meta device (see `CausalLM.load_weights`)."""
    if meta:
        import torch
        with torch.device("meta"):
            return build_model(cfg, meta=False)
    if cfg.arch in LLAMA_FAMILY:
        from backends.cuda.models.llama import LlamaModel
        return LlamaModel(cfg)
    if cfg.arch == "gemma3":
        from backends.cuda.models.gemma3 import Gemma3Model
        return Gemma3Model(cfg)
    raise ValueError(f"no model class for {cfg.arch!r}")
