"""Reading an MLX model directory's config.json (no mlx import: the Runtime and the fit model
use this in the main process)."""

from __future__ import annotations

import json
from pathlib import Path

from backends.errors import ModelFileError

WEIGHTS_GLOB = "model*.safetensors"  # what mlx-lm's load_model reads


def read_config(folder: Path) -> dict:
    """config.json of an MLX model directory, with a clear error for what is missing."""
    if not folder.is_dir():
        raise ModelFileError(f"{folder}: an MLX model is a directory (config.json, "
                             "*.safetensors, tokenizer.json); this is not one")
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ModelFileError(f"{folder}: no config.json, so not an MLX model directory") from e
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelFileError(f"{path}: has no model_type, so mlx-lm cannot tell the "
                             "architecture")
    if not any(folder.glob(WEIGHTS_GLOB)):
        raise ModelFileError(f"{folder}: no {WEIGHTS_GLOB} weights")
    return config


def weights_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob(WEIGHTS_GLOB))


def kv_bytes_per_token(config: dict, float32: bool = False) -> int:
    """K and V of every layer for one token: 2 bytes per value (bf16/fp16 activations), 4
    where the backend runs in float32 (the CPU, see backend.float32_activations)."""
    heads = int(config.get("num_attention_heads", 1))
    head_dim = int(config.get("head_dim") or int(config.get("hidden_size", 0)) // max(heads, 1))
    kv_heads = int(config.get("num_key_value_heads", heads))
    return 2 * int(config.get("num_hidden_layers", 1)) * kv_heads * head_dim * (4 if float32
                                                                                 else 2)
