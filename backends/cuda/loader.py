"""Weights into torch: GGUF files (dequantized with the `gguf` package's reference code) and
Hugging Face safetensors directories (config.json + *.safetensors).

Both end as one state dict under the engine's own parameter names (GGUF's, with `blk.N`
spelled `layers.N`), so the model classes never see where the weights came from.

Two traps, both from llama.cpp's converter (convert_hf_to_gguf.py):
- GGUF lists dimensions fastest-first (ne0 = columns). `gguf.quants.dequantize` already
  returns numpy arrays in row-major (out, in) order, which is torch's Linear layout.
- For `llama`-arch models (Llama, Mistral) the converter permutes the rows of Q and K so that
  llama.cpp can rotate adjacent pairs; we undo it, and every model rotates halves (NeoX
  style, as Hugging Face does). Qwen2/3 and Gemma 3 are stored unpermuted.
- Gemma's converter adds 1 to every RMSNorm weight (Gemma normalises with (1 + w)); for
  safetensors we add it ourselves, so the model applies a plain `x * w` for both.

With `quant` ("int8", "int4", "fp8") every Linear weight (attention, MLP, an untied output
head) comes back packed for the kernels (kernels.quant): int8 per output channel, except GGUF
Q8_0 tensors, kept exactly at their 32-weight blocks; int4 in groups of 128; fp8 (e4m3) per
output channel, refused on a GPU without FP8 (kernels.fp8). Each tensor converts on its own;
the model fuses q/k/v and gate/up afterwards (backends/cuda/fuse.py).
Embeddings, norms and biases stay in `dtype`; a head tied to the embedding stays too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from backends.cuda.model_config import (
    HF_ARCHITECTURES,
    SUPPORTED,
    ModelConfig,
    llama3_freq_factors,
)
from backends.errors import InvalidRequestError, ModelFileError
from kernels.quant import QUANT_TYPES, PackedWeight, from_q4_k, from_q8_0, quantize

# the Linear weights, as the loader names them and as a fused model's state dict does
LINEAR = re.compile(r"layers\.\d+\.(attn\.([qkvo]|qkv)|mlp\.(gate|up|down|gate_up))\.weight"
                    r"|output\.weight")


@dataclass
class LoadedWeights:
    config: ModelConfig
    tensors: dict[str, torch.Tensor | PackedWeight]


def load_weights(path: Path, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", quant: str | None = None
                 ) -> LoadedWeights:
    path = Path(path)
    if quant is not None and quant not in QUANT_TYPES:
        raise InvalidRequestError(f"unknown weight quantization {quant!r} for the cuda "
                                  f"backend: use one of {', '.join(QUANT_TYPES)}")
    if quant == "fp8":
        from kernels.fp8 import check_fp8_device
        try:
            check_fp8_device(device)
        except ValueError as e:
            raise InvalidRequestError(str(e)) from e
    if path.is_dir():
        return _load_safetensors(path, dtype, device, quant)
    if path.suffix.lower() == ".gguf":
        return _load_gguf(path, dtype, device, quant)
    raise ModelFileError(f"{path}: the cuda backend reads .gguf files or a folder with "
                         "config.json and *.safetensors")


def pack(name: str, w: torch.Tensor, quant: str, group_size: int | None = None
         ) -> PackedWeight:
    """A float Linear weight in the `quant` layout, or an error that names the tensor."""
    try:
        return quantize(w, quant, group_size)
    except ValueError as e:
        raise InvalidRequestError(f"{name} cannot be stored as {quant}: {e}") from e


# -- GGUF --------------------------------------------------------------------------------
GGUF_NAMES = {  # GGUF tensor name (after blk.N.) -> ours
    "attn_q": "attn.q", "attn_k": "attn.k", "attn_v": "attn.v", "attn_output": "attn.o",
    "attn_q_norm": "attn.q_norm", "attn_k_norm": "attn.k_norm",
    "attn_norm": "attn_norm", "post_attention_norm": "post_attn_norm",
    "ffn_norm": "ffn_norm", "post_ffw_norm": "post_ffn_norm",
    "ffn_gate": "mlp.gate", "ffn_up": "mlp.up", "ffn_down": "mlp.down",
}
TOP_NAMES = {"token_embd": "tok_embd", "output_norm": "output_norm", "output": "output"}


def gguf_config(fields: dict, vocab_size: int, tensor_names: set[str],
                freq_factors: tuple[float, ...] | None = None) -> ModelConfig:
    arch = fields["general.architecture"]
    if arch not in SUPPORTED:
        raise ModelFileError(f"architecture {arch!r} is not supported by the cuda backend "
                             f"(it runs {', '.join(SUPPORTED)}); use --backend llamacpp")

    def get(key: str, default: Any = None) -> Any:  # a GGUF value: numbers, str, lists
        return fields.get(f"{arch}.{key}", default)

    hidden, heads = get("embedding_length"), get("attention.head_count")
    head_dim = get("attention.key_length", hidden // heads)
    extra = {}
    if arch == "gemma3":
        extra = dict(
            sliding_window=get("attention.sliding_window", 0), sliding_pattern=6,
            # llama.cpp's gemma3: sliding layers rotate with base 10,000 (not in the file);
            # the 27B scales queries by hidden/heads, the others by head_dim
            rope_local_theta=float(get("rope.freq_base_swa", 10000.0)),
            attn_scale=((hidden / heads) ** -0.5 if get("block_count") == 62
                        else head_dim ** -0.5),
            rope_scaling=float(get("rope.scaling.factor", 1.0)),
        )
    return ModelConfig(
        arch=arch, vocab_size=vocab_size, hidden_size=hidden, num_layers=get("block_count"),
        num_heads=heads, num_kv_heads=get("attention.head_count_kv", heads), head_dim=head_dim,
        intermediate_size=get("feed_forward_length"),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        max_position=get("context_length", 4096),
        tie_embeddings="output.weight" not in tensor_names,
        qkv_bias="blk.0.attn_q.bias" in tensor_names,
        qk_norm="blk.0.attn_q_norm.weight" in tensor_names, rope_freq_factors=freq_factors,
        **extra)


def gguf_name(name: str) -> str:
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name)
    if m:
        return f"layers.{m[1]}.{GGUF_NAMES[m[2]]}.{m[3]}"
    base, _, kind = name.rpartition(".")
    return f"{TOP_NAMES[base]}.{kind}"


def unpermute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's converter permutation of Q/K rows (its `permute` for llama arch)."""
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
             .transpose(1, 2).reshape(w.shape))


def permute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's converter permutation (kept to test that `unpermute_qk` inverts it)."""
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
             .transpose(1, 2).reshape(w.shape))


def pack_linears(tensors: dict[str, torch.Tensor], quant: str
                 ) -> dict[str, torch.Tensor | PackedWeight]:
    """A float state dict with every Linear weight packed (int8 and fp8 per channel, int4
    group 128):
    for weights that are already in memory, such as a benchmark's random model."""
    return {name: pack(name, t, quant) if LINEAR.fullmatch(name) else t
            for name, t in tensors.items()}


def _load_gguf(path: Path, dtype: torch.dtype, device: torch.device | str,
               quant: str | None) -> LoadedWeights:
    from gguf import GGMLQuantizationType

    from backends.gguf_tensors import FastGGUFReader, tensor_to_float32

    try:
        reader = FastGGUFReader(path)
    except (ValueError, OSError) as e:
        raise ModelFileError(f"{path}: not a readable GGUF file ({e})") from e
    fields = {k: f.contents() for k, f in reader.fields.items()
              if not k.startswith("tokenizer.ggml.")}
    names = {t.name for t in reader.tensors}
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    freqs = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    config = gguf_config(fields, int(embd.shape[1]), names,
                         None if freqs is None else tuple(float(x) for x in freqs.data))
    tensors: dict[str, torch.Tensor | PackedWeight] = {}
    for t in reader.tensors:
        if t.name not in ("token_embd.weight", "output_norm.weight", "output.weight") and \
                not t.name.startswith("blk."):
            continue  # rope_freqs (Llama 3.1+) went into the config
        name = gguf_name(t.name)
        permuted = config.arch in ("llama", "mistral") and \
            t.name.endswith(("attn_q.weight", "attn_k.weight"))
        shape = (int(t.shape[1]), int(t.shape[0])) if len(t.shape) == 2 else ()
        q8_0 = t.tensor_type == GGMLQuantizationType.Q8_0
        if quant and len(shape) == 2 and LINEAR.fullmatch(name) and not permuted and \
                (quant, t.tensor_type) in (("int8", GGMLQuantizationType.Q8_0),
                                           ("int4", GGMLQuantizationType.Q4_K)):
            # straight from the blocks (Q4_K re-quantizes to group 128 inside from_q4_k)
            packed = from_q8_0(t.data, shape) if q8_0 else from_q4_k(t.data, shape)
            tensors[name] = packed.to(device)
            continue
        w = torch.from_numpy(tensor_to_float32(t))
        if permuted:
            w = unpermute_qk(w, config.num_heads if t.name.endswith("attn_q.weight")
                             else config.num_kv_heads)
        if quant and LINEAR.fullmatch(name):
            # a Q8_0 source re-quantized at its own 32-blocks gives back its exact values
            group = 32 if quant == "int8" and q8_0 else None
            tensors[name] = pack(name, w.to(device), quant, group)
        else:
            tensors[name] = w.to(device=device, dtype=dtype)
    return LoadedWeights(config, tensors)


# -- safetensors -------------------------------------------------------------------------
HF_LAYER_NAMES = {
    "self_attn.q_proj": "attn.q", "self_attn.k_proj": "attn.k", "self_attn.v_proj": "attn.v",
    "self_attn.o_proj": "attn.o", "self_attn.q_norm": "attn.q_norm",
    "self_attn.k_norm": "attn.k_norm", "input_layernorm": "attn_norm",
    "mlp.gate_proj": "mlp.gate", "mlp.up_proj": "mlp.up", "mlp.down_proj": "mlp.down",
    "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffn_norm",
}


def hf_config(cfg: dict) -> ModelConfig:
    cfg = cfg.get("text_config", cfg) | {"architectures": cfg.get("architectures", [])}
    arch = next((HF_ARCHITECTURES[a] for a in cfg["architectures"] if a in HF_ARCHITECTURES),
                None)
    if arch is None:
        raise ModelFileError(f"architectures {cfg['architectures']} are not supported by the "
                             f"cuda backend (it runs {', '.join(HF_ARCHITECTURES)})")
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    extra: dict[str, Any] = {}  # ModelConfig's fields this architecture sets
    scaling = cfg.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) == "llama3":
        extra["rope_freq_factors"] = llama3_freq_factors(
            head_dim, float(cfg.get("rope_theta", 10000.0)), scaling)
    if arch == "gemma3":
        extra |= dict(sliding_window=cfg.get("sliding_window", 0),
                      sliding_pattern=cfg.get("sliding_window_pattern", 6),
                      rope_local_theta=float(cfg.get("rope_local_base_freq", 10000.0)),
                      attn_scale=cfg.get("query_pre_attn_scalar", head_dim) ** -0.5,
                      rope_scaling=float(scaling.get("factor", 1.0)))
    return ModelConfig(
        arch=arch, vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
        num_layers=cfg["num_hidden_layers"], num_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads", heads), head_dim=head_dim,
        intermediate_size=cfg["intermediate_size"],
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        max_position=cfg.get("max_position_embeddings", 4096),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", arch == "gemma3")),
        qkv_bias=arch == "qwen2", qk_norm=arch in ("qwen3", "gemma3"), **extra)


def hf_name(name: str, arch: str) -> str | None:
    name = name.removeprefix("model.language_model.").removeprefix("model.")
    if name.startswith("lm_head."):
        return "output." + name.split(".")[-1]
    if name.startswith("embed_tokens."):
        return "tok_embd.weight"
    if name == "norm.weight":
        return "output_norm.weight"
    m = re.fullmatch(r"layers\.(\d+)\.(.+)\.(weight|bias)", name)
    if not m:
        return None  # vision tower, rotary caches and other tensors we do not use
    part = m[2]
    part_ours: str | None
    if part == "post_attention_layernorm":
        # Llama's norm before the MLP; Gemma's norm after attention
        part_ours = "post_attn_norm" if arch == "gemma3" else "ffn_norm"
    else:
        part_ours = HF_LAYER_NAMES.get(part)
    return f"layers.{m[1]}.{part_ours}.{m[3]}" if part_ours else None


def _load_safetensors(path: Path, dtype: torch.dtype, device: torch.device | str,
                      quant: str | None) -> LoadedWeights:
    from safetensors.torch import load_file

    config_file = path / "config.json"
    files = sorted(path.glob("*.safetensors"))
    if not config_file.is_file() or not files:
        raise ModelFileError(f"{path}: a Hugging Face model folder needs config.json and "
                             "*.safetensors files")
    config = hf_config(json.loads(config_file.read_text()))
    tensors: dict[str, torch.Tensor | PackedWeight] = {}
    for f in files:
        for name, w in load_file(str(f)).items():
            ours = hf_name(name, config.arch)
            if ours is None:
                continue
            w = w.float()
            if config.arch == "gemma3" and ours.endswith("norm.weight"):
                w = w + 1.0  # Gemma's (1 + w) RMSNorm, folded in as llama.cpp's converter does
            if quant and LINEAR.fullmatch(ours):
                tensors[ours] = pack(ours, w.to(device), quant)
            else:
                tensors[ours] = w.to(device=device, dtype=dtype)
    return LoadedWeights(config, tensors)
