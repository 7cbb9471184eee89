"""GGUF -> MLX: dequantize a GGUF file with `gguf`, rename its tensors the way Hugging Face
checkpoints (and so mlx-lm) name them, write config.json and the tokenizer, quantize with mlx.

`mx.load()` reads GGUF, but not k-quants or Q5_0 (what Q4_K_M files are made of), hence
ggml's own dequantization (backends/gguf_tensors.py). The result is a plain MLX model
directory, the same layout as an mlx-community repo, so mlx-lm and other MLX tools can load
it too.

The GGUF weights are already quantized; quantizing them again for MLX adds a second rounding.
8-bit keeps the model almost exactly (its step is far below Q4_K's); 4-bit costs more: on
Qwen2.5-Coder-0.5B Q4_K_M, 96.8% against 81.0% top-1 agreement with llama.cpp
(docs/notes/mlx-on-cpu.md). Prefer --bits 8 when converting a 4-5 bit GGUF.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.errors import ModelFileError

if TYPE_CHECKING:
    from gguf import GGUFReader

GROUP_SIZE = 64  # mlx-community's default; 4-bit at group 64 stores 4.5 bits per weight
# HF model_type and class per GGUF architecture: the decoder-only families whose tensors map
# one to one (Gemma is left out: llama.cpp stores its norms as 1 + weight).
ARCHITECTURES = {
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "llama": ("llama", "LlamaForCausalLM"),
}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


@dataclass(frozen=True)
class ConvertResult:
    path: Path
    architecture: str
    context_length: int
    chat: bool
    seconds: float


def hf_name(gguf_name: str) -> str:
    """The Hugging Face name of a GGUF tensor (`blk.3.attn_q.weight` ->
    `model.layers.3.self_attn.q_proj.weight`)."""
    if m := _BLOCK_NAME.match(gguf_name):
        block, part, kind = m.groups()
        if part in _BLOCK:
            return f"model.layers.{block}.{_BLOCK[part]}.{kind}"
    else:
        base, _, kind = gguf_name.rpartition(".")
        if base in _TOP:
            return f"{_TOP[base]}.{kind}"
    raise ModelFileError(f"GGUF tensor {gguf_name!r} has no MLX counterpart in this converter")


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's reordering of llama Q/K rows (its converter interleaves the rotary
    halves for its own rope; HF checkpoints keep them split)."""
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _metadata(reader: GGUFReader) -> dict[str, Any]:
    return {key: field.contents() for key, field in reader.fields.items()}


def hf_config(meta: dict, tensors: set[str]) -> dict:
    arch = meta["general.architecture"]
    model_type, cls = ARCHITECTURES[arch]

    def get(key: str, default: object = None) -> Any:  # a GGUF value: numbers, str, lists
        return meta.get(f"{arch}.{key}", default)

    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    config = {
        "architectures": [cls], "model_type": model_type,
        "hidden_size": hidden, "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")), "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": int(get("attention.key_length", hidden // heads)),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(get("context_length", 4096)),
        "vocab_size": len(meta["tokenizer.ggml.tokens"]),
        # llama.cpp often keeps a separate (better quantized) output matrix even for a tied
        # model; we keep whatever the file has.
        "tie_word_embeddings": "output.weight" not in tensors,
    }
    for key in ("bos_token_id", "eos_token_id"):
        if f"tokenizer.ggml.{key}" in meta:
            config[key] = int(meta[f"tokenizer.ggml.{key}"])
    return config


def write_tokenizer(meta: dict, out: Path) -> bool:
    """tokenizer.json from the GGUF vocabulary and merges (transformers' GGUF tokenizer
    builders: byte-level BPE with the pre-tokenizer regex llama.cpp names in tokenizer.ggml.pre,
    or sentencepiece), and tokenizer_config.json with the chat template. Returns whether the
    model has a chat template."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )

    fields = {name: meta[f"tokenizer.{key}"]
              for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
              if f"tokenizer.{key}" in meta}
    try:
        tokenizer, _ = convert_gguf_tokenizer(meta["general.architecture"], fields)
    except (ValueError, KeyError) as e:
        raise ModelFileError(f"cannot rebuild this GGUF file's tokenizer: {e}") from e
    tokenizer.save(str(out / "tokenizer.json"))
    tokens = meta["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        i = meta.get(f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    template = meta.get("tokenizer.chat_template")
    default_bos = meta.get("tokenizer.ggml.model") == "llama"  # llama.cpp's rule
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("bos_token_id"), "eos_token": token("eos_token_id"),
        "pad_token": token("padding_token_id"),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", default_bos)),
        "chat_template": template,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False),
                                               encoding="utf-8")
    return bool(template)


def convert_gguf(gguf_path: Path, out: Path, bits: int = 4,
                 on_step: Callable[[str], None] | None = None) -> ConvertResult:
    """Write an MLX model directory for `gguf_path` into `out` (which must not exist)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

    from backends.gguf_tensors import FastGGUFReader, tensor_to_float32

    if bits not in (4, 8):
        raise ModelFileError(f"MLX conversion takes --bits 4 or 8, not {bits}")
    say = on_step or (lambda _msg: None)
    started = time.perf_counter()
    say(f"reading {gguf_path.name}")
    try:
        reader = FastGGUFReader(gguf_path)
    except (ValueError, OSError) as e:
        raise ModelFileError(f"{gguf_path}: not a readable GGUF file ({e})") from e
    meta = _metadata(reader)
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelFileError(f"converting {arch!r} models to MLX is not supported (supported: "
                             f"{', '.join(sorted(ARCHITECTURES))})")
    config = hf_config(meta, {t.name for t in reader.tensors})

    say(f"dequantizing {len(reader.tensors)} tensors")
    weights: dict[str, mx.array] = {}
    for t in reader.tensors:
        # gguf lists shapes fastest dimension first; numpy wants them the other way round
        data = tensor_to_float32(t)
        data = data.reshape([int(d) for d in reversed(t.shape)])
        if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = config["num_attention_heads" if "attn_q" in t.name
                           else "num_key_value_heads"]
            data = unpermute(data, heads)
        # bfloat16, as the original checkpoints: wide range, and what mlx-community ships
        weights[hf_name(t.name)] = mx.array(data.astype(np.float32)).astype(mx.bfloat16)

    model_cls, args_cls = _get_classes(config)
    model = model_cls(args_cls.from_dict(config))
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as e:
        raise ModelFileError(f"{gguf_path.name}: its tensors do not make a {arch} model ({e})") \
            from e
    del weights
    say(f"quantizing to {bits}-bit (group {GROUP_SIZE})")
    model, config = quantize_model(model, config, group_size=GROUP_SIZE, bits=bits)
    mx.eval(dict(tree_flatten(model.parameters())))

    out.mkdir(parents=True)
    save_model(out, model)
    save_config(config, out / "config.json")
    chat = write_tokenizer(meta, out)
    return ConvertResult(out, arch, config["max_position_embeddings"], chat,
                         round(time.perf_counter() - started, 1))
