"""Tiny vision models written in a test's folder: a random-weights language model and its
multimodal projector (mmproj), as GGUF files in the layouts llama.cpp's mtmd library reads from
a real Gemma 3 or Qwen2.5-VL download, so a test loads them through the same code path.

The key and tensor names are the ones llama.cpp's loaders read (vendor/llama.cpp in the
llama-cpp-python sdist): `src/models/gemma3.cpp` and `src/models/qwen2vl.cpp` for the language
models; `tools/mtmd/clip.cpp` (load_hparams, load_tensors), `clip-impl.h` (KEY_*, TN_*) and
`models/siglip.cpp` / `models/qwen2vl.cpp` for the projectors, with the metadata that
`conversion/gemma.py` (Gemma3VisionModel) and `conversion/qwenvl.py` (Qwen2VLVisionModel)
write. Only the sizes are small: a few blocks, narrow widths, a small input resolution.

The tokenizers are llama.cpp's vendored vocabularies (tests/support/llama_sdist.py), with the
special tokens the real models' vocabularies add: Gemma's turn and image tokens after the SPM
vocabulary's 32000, Qwen2-VL's vision tokens in the places the Qwen2 vocabulary pads
(151646..151656, the ids Qwen2.5-VL gives them). The vocabularies are copied with a walk of
our own: gguf.GGUFReader takes 10 s over Qwen2's 150k tokens and merges, the walk 0.1 s."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from tests.support.families import OURS
from tests.support.llama_sdist import vocab

LM_EMBD, LM_HEADS, LM_KV_HEADS, LM_HEAD_DIM, LM_FF, LM_BLOCKS = 64, 2, 1, 32, 96, 2
LM_CONTEXT = 4096
V_EMBD, V_HEADS, V_FF, V_BLOCKS, PATCH = 32, 2, 48, 2, 14  # V_FF != V_EMBD: see _vision_block
STD = 0.02  # small weights: activations and logits stay finite through every layer

GEMMA3_IMAGE_SIZE = 224  # 16x16 patches, pooled 4x4 (mtmd's default for Gemma 3): 16 tokens
QWEN_IMAGE_SIZE = 112  # 8x8 patches, merged 2x2: 16 tokens (mtmd's minimum is 8)

# Gemma 3's vocabulary has these as control tokens (ids 105, 106, 255999, 256000 there)
GEMMA_SPECIALS = ("<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>")
# Qwen2-VL's added tokens, in its vocabulary's order from 151646
QWEN_VL_SPECIALS = ("<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
                    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
QWEN_VL_FIRST_SPECIAL = 151646
CONTROL = int(gguf.TokenType.CONTROL)
# pixel normalization (mean, std): SigLIP's for Gemma 3, OpenAI CLIP's for Qwen2.5-VL
SIGLIP_MEAN_STD = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
CLIP_MEAN_STD = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])


@dataclass(frozen=True)
class TinyVisionModel:
    model: Path  # the LM GGUF
    projector: Path  # mmproj GGUF
    family: str  # "gemma3" | "qwen2vl"
    image_size: int  # projector's input resolution
    image_tokens: int  # tokens one image costs (as mtmd reports for an image at that size)


def write_tiny_gemma3_vision(folder: Path, seed: int = 0) -> TinyVisionModel:
    """Gemma 3: a `gemma3` LM (sliding-window and global layers, QK norms, post norms,
    tied output) and a SigLIP projector of type `gemma3` (average pool, soft-embedding norm,
    input projection to the LM's width)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    model, projector = folder / "tiny-gemma3-vision.gguf", folder / "mmproj-tiny-gemma3.gguf"
    _write_gemma3_lm(model, rng)
    _write_gemma3_projector(projector, rng)
    tokens = (GEMMA3_IMAGE_SIZE // PATCH // 4) ** 2
    return TinyVisionModel(model, projector, "gemma3", GEMMA3_IMAGE_SIZE, tokens)


def write_tiny_qwen2vl_vision(folder: Path, seed: int = 0) -> TinyVisionModel:
    """Qwen2.5-VL: a `qwen2vl` LM (M-RoPE in sections, biased Q/K/V, tied output) and a
    projector of type `qwen2.5vl_merger` (two-frame patch embedding, RMS norms, SwiGLU, window
    attention every other block, 2x2 merger MLP)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    model, projector = folder / "tiny-qwen2.5-vl.gguf", folder / "mmproj-tiny-qwen2.5-vl.gguf"
    _write_qwen2vl_lm(model, rng)
    _write_qwen25vl_projector(projector, rng)
    tokens = (QWEN_IMAGE_SIZE // (PATCH * 2)) ** 2
    return TinyVisionModel(model, projector, "qwen2vl", QWEN_IMAGE_SIZE, tokens)


# --- language models -------------------------------------------------------------------------

def _write_gemma3_lm(path: Path, rng: np.random.Generator) -> None:
    kv = _vocab_kv("llama-spm")
    tokens = [*kv["tokenizer.ggml.tokens"][1], *(t.encode() for t in GEMMA_SPECIALS)]
    extra = len(GEMMA_SPECIALS)
    kv["tokenizer.ggml.tokens"] = (gguf.GGUFValueType.ARRAY, tokens)
    kv["tokenizer.ggml.scores"] = _appended(kv["tokenizer.ggml.scores"], np.float32, extra, 0)
    kv["tokenizer.ggml.token_type"] = _appended(kv["tokenizer.ggml.token_type"], np.int32,
                                                extra, CONTROL)
    w = _Writer(path, "gemma3", "Tiny Gemma 3 Vision (random weights)")
    _lm_hparams(w, "gemma3", rope_base=1_000_000.0)
    # layer 0 sliding-window, layer 1 global: Gemma 3's 5:1 pattern shrunk to two layers
    w.add_uint32("gemma3.attention.sliding_window", 512)
    w.add_uint32("gemma3.attention.sliding_window_pattern", 2)
    w.add_uint32("gemma3.attention.key_length", LM_HEAD_DIM)
    w.add_uint32("gemma3.attention.value_length", LM_HEAD_DIM)
    _add_tokenizer(w, kv, (OURS / "google-gemma-3-it.jinja").read_text(encoding="utf-8"))
    t = _lm_tensors(rng, len(tokens), qkv_bias=False)
    for i in range(LM_BLOCKS):
        p = f"blk.{i}."
        t[p + "attn_q_norm.weight"] = _ones(LM_HEAD_DIM)
        t[p + "attn_k_norm.weight"] = _ones(LM_HEAD_DIM)
        t[p + "post_attention_norm.weight"] = _ones(LM_EMBD)
        t[p + "post_ffw_norm.weight"] = _ones(LM_EMBD)
    w.write(t)


def _write_qwen2vl_lm(path: Path, rng: np.random.Generator) -> None:
    kv = _vocab_kv("qwen2")
    tokens = list(kv["tokenizer.ggml.tokens"][1])
    types = np.frombuffer(kv["tokenizer.ggml.token_type"][1].data, dtype=np.int32).copy()
    for i, name in enumerate(QWEN_VL_SPECIALS, QWEN_VL_FIRST_SPECIAL):
        tokens[i], types[i] = name.encode(), CONTROL
    kv["tokenizer.ggml.tokens"] = (gguf.GGUFValueType.ARRAY, tokens)
    kv["tokenizer.ggml.token_type"] = (gguf.GGUFValueType.ARRAY,
                                       _Array(gguf.GGUFValueType.INT32, types.tobytes()))
    w = _Writer(path, "qwen2vl", "Tiny Qwen2.5-VL (random weights)")
    _lm_hparams(w, "qwen2vl", rope_base=1_000_000.0)
    # Qwen2.5-VL's [16, 24, 24] of a 128-wide head, scaled to a 32-wide one (sum = half)
    w.add_array("qwen2vl.rope.dimension_sections", [4, 6, 6, 0])
    _add_tokenizer(w, kv, (OURS / "Qwen-Qwen2.5-VL-7B-Instruct.jinja").read_text(
        encoding="utf-8"))
    w.write(_lm_tensors(rng, len(tokens), qkv_bias=True))


def _lm_hparams(w: _Writer, arch: str, rope_base: float) -> None:
    w.add_uint32(f"{arch}.context_length", LM_CONTEXT)
    w.add_uint32(f"{arch}.embedding_length", LM_EMBD)
    w.add_uint32(f"{arch}.block_count", LM_BLOCKS)
    w.add_uint32(f"{arch}.feed_forward_length", LM_FF)
    w.add_uint32(f"{arch}.attention.head_count", LM_HEADS)
    w.add_uint32(f"{arch}.attention.head_count_kv", LM_KV_HEADS)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{arch}.rope.freq_base", rope_base)


def _lm_tensors(rng: np.random.Generator, n_vocab: int, qkv_bias: bool) -> dict[str, np.ndarray]:
    """numpy shapes are ggml's reversed: token_embd is (n_vocab, n_embd). No output.weight:
    both loaders tie it to the embedding (Gemma 3 and Qwen2.5-VL 3B ship it so)."""
    q, k = LM_HEADS * LM_HEAD_DIM, LM_KV_HEADS * LM_HEAD_DIM
    t = {"token_embd.weight": _normal(rng, n_vocab, LM_EMBD).astype(np.float16),
         "output_norm.weight": _ones(LM_EMBD)}
    for i in range(LM_BLOCKS):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = _ones(LM_EMBD)
        t[p + "attn_q.weight"] = _normal(rng, q, LM_EMBD)
        t[p + "attn_k.weight"] = _normal(rng, k, LM_EMBD)
        t[p + "attn_v.weight"] = _normal(rng, k, LM_EMBD)
        if qkv_bias:
            t[p + "attn_q.bias"] = _normal(rng, q)
            t[p + "attn_k.bias"] = _normal(rng, k)
            t[p + "attn_v.bias"] = _normal(rng, k)
        t[p + "attn_output.weight"] = _normal(rng, LM_EMBD, q)
        t[p + "ffn_norm.weight"] = _ones(LM_EMBD)
        t[p + "ffn_gate.weight"] = _normal(rng, LM_FF, LM_EMBD)
        t[p + "ffn_up.weight"] = _normal(rng, LM_FF, LM_EMBD)
        t[p + "ffn_down.weight"] = _normal(rng, LM_EMBD, LM_FF)
    return t


# --- projectors ------------------------------------------------------------------------------

def _write_gemma3_projector(path: Path, rng: np.random.Generator) -> None:
    w = _Writer(path, "clip", "Tiny Gemma 3 Vision projector (random weights)")
    _clip_hparams(w, GEMMA3_IMAGE_SIZE, SIGLIP_MEAN_STD)
    w.add_string("clip.projector_type", "gemma3")
    w.add_bool("clip.use_gelu", True)
    n_patches = (GEMMA3_IMAGE_SIZE // PATCH) ** 2
    t = {"v.patch_embd.weight": _normal(rng, V_EMBD, 3, PATCH, PATCH),
         "v.patch_embd.bias": _normal(rng, V_EMBD),
         "v.position_embd.weight": _normal(rng, n_patches, V_EMBD),
         "v.post_ln.weight": _ones(V_EMBD), "v.post_ln.bias": _zeros(V_EMBD),
         # Gemma3MultiModalProjector: RMS norm (stored +1, as the converter does), then a
         # (vision width, text width) matrix the graph transposes
         "mm.soft_emb_norm.weight": _ones(V_EMBD),
         "mm.input_projection.weight": _normal(rng, V_EMBD, LM_EMBD)}
    for i in range(V_BLOCKS):
        t.update(_vision_block(rng, i, biased_norms=True, gated=False))
    w.write(t)


def _write_qwen25vl_projector(path: Path, rng: np.random.Generator) -> None:
    w = _Writer(path, "clip", "Tiny Qwen2.5-VL projector (random weights)")
    _clip_hparams(w, QWEN_IMAGE_SIZE, CLIP_MEAN_STD)
    w.add_string("clip.projector_type", "qwen2.5vl_merger")
    w.add_bool("clip.use_silu", True)
    w.add_uint32("clip.vision.n_wa_pattern", 2)  # block 1 full attention, block 0 windowed
    merged = V_EMBD * 4  # 2x2 patches side by side
    # Conv3D over two frames, split into two Conv2Ds (conversion/qwenvl.py), no bias
    t = {"v.patch_embd.weight": _normal(rng, V_EMBD, 3, PATCH, PATCH),
         "v.patch_embd.weight.1": _normal(rng, V_EMBD, 3, PATCH, PATCH),
         "v.post_ln.weight": _ones(V_EMBD),
         "mm.0.weight": _normal(rng, merged, merged), "mm.0.bias": _normal(rng, merged),
         "mm.2.weight": _normal(rng, LM_EMBD, merged), "mm.2.bias": _normal(rng, LM_EMBD)}
    for i in range(V_BLOCKS):
        t.update(_vision_block(rng, i, biased_norms=False, gated=True))
    w.write(t)


def _clip_hparams(w: _Writer, image_size: int, mean_std: tuple[list[float], list[float]]) -> None:
    w.add_uint32("general.file_type", int(gguf.LlamaFileType.ALL_F32))
    w.add_bool("clip.has_vision_encoder", True)
    w.add_uint32("clip.vision.projection_dim", LM_EMBD)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", PATCH)
    w.add_uint32("clip.vision.embedding_length", V_EMBD)
    w.add_uint32("clip.vision.feed_forward_length", V_FF)
    w.add_uint32("clip.vision.block_count", V_BLOCKS)
    w.add_uint32("clip.vision.attention.head_count", V_HEADS)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", mean_std[0])
    w.add_array("clip.vision.image_std", mean_std[1])


def _vision_block(rng: np.random.Generator, i: int, *, biased_norms: bool,
                  gated: bool) -> dict[str, np.ndarray]:
    """One ViT block. clip.cpp swaps ffn_up and ffn_down of these projector types when
    ffn_down's first ggml dimension equals n_embd (old exports): with V_FF != V_EMBD ours
    are read as written."""
    p = f"v.blk.{i}."
    t = {p + "ln1.weight": _ones(V_EMBD), p + "ln2.weight": _ones(V_EMBD)}
    if biased_norms:
        t[p + "ln1.bias"], t[p + "ln2.bias"] = _zeros(V_EMBD), _zeros(V_EMBD)
    for m in ("attn_q", "attn_k", "attn_v", "attn_out"):
        t[p + m + ".weight"] = _normal(rng, V_EMBD, V_EMBD)
        t[p + m + ".bias"] = _normal(rng, V_EMBD)
    t[p + "ffn_up.weight"], t[p + "ffn_up.bias"] = _normal(rng, V_FF, V_EMBD), _normal(rng, V_FF)
    if gated:
        t[p + "ffn_gate.weight"] = _normal(rng, V_FF, V_EMBD)
        t[p + "ffn_gate.bias"] = _normal(rng, V_FF)
    t[p + "ffn_down.weight"] = _normal(rng, V_EMBD, V_FF)
    t[p + "ffn_down.bias"] = _normal(rng, V_EMBD)
    return t


# --- GGUF writing ----------------------------------------------------------------------------

def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) * STD).astype(np.float32)


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=np.float32)


class _Raw:
    """A metadata value already in GGUF's bytes (its type word and value): a vocabulary's
    token arrays are copied so, not packed again item by item."""

    def __init__(self, data: bytes) -> None:
        self.data = data


class _Writer(gguf.GGUFWriter):
    def __init__(self, path: Path, arch: str, name: str) -> None:
        super().__init__(str(path), arch)
        self.add_type("mmproj" if arch == "clip" else "model")  # as the converter marks them
        self.add_name(name)

    def add_raw(self, key: str, data: bytes) -> None:
        self.add_key_value(key, _Raw(data), gguf.GGUFValueType.ARRAY)

    def _pack_val(self, val: Any, vtype: gguf.GGUFValueType, add_vtype: bool,
                  sub_type: gguf.GGUFValueType | None = None) -> bytes:
        if isinstance(val, _Raw):
            return val.data
        return super()._pack_val(val, vtype, add_vtype, sub_type)

    def write(self, tensors: dict[str, np.ndarray]) -> None:
        for name, array in tensors.items():
            self.add_tensor(name, array)
        self.write_header_to_file()
        self.write_kv_data_to_file()
        self.write_tensors_to_file()
        self.close()


@dataclass(frozen=True)
class _Array:
    """A GGUF array of numbers, as its item type and the items' bytes."""
    item_type: int
    data: bytes


# GGUF value type, and the value: a scalar's or a string's bytes, an _Array, or a string
# array's items (a tuple, or a list where a writer changes them)
_Value = tuple[int, Any]


def _add_tokenizer(w: _Writer, kv: dict[str, _Value], chat_template: str) -> None:
    for key, (vtype, value) in kv.items():
        if key == "tokenizer.chat_template":
            continue
        w.add_raw(key, _encode(vtype, value))
    w.add_chat_template(chat_template)


def _appended(value: _Value, dtype: type, count: int, fill: int) -> _Value:
    vtype, array = value
    extra = np.full(count, fill, dtype=dtype).tobytes()
    return vtype, _Array(array.item_type, array.data + extra)


def _encode(vtype: int, value: Any) -> bytes:
    head = struct.pack("<I", vtype)
    if vtype == gguf.GGUFValueType.STRING:
        return head + struct.pack("<Q", len(value)) + value
    if vtype == gguf.GGUFValueType.ARRAY:
        if isinstance(value, _Array):
            count = len(value.data) // _SIZES[value.item_type]
            return head + struct.pack("<IQ", value.item_type, count) + value.data
        items = b"".join(struct.pack("<Q", len(s)) + s for s in value)
        return head + struct.pack("<IQ", gguf.GGUFValueType.STRING, len(value)) + items
    return head + value


_SIZES: dict[int, int] = {gguf.GGUFValueType.UINT8: 1, gguf.GGUFValueType.INT8: 1,
          gguf.GGUFValueType.UINT16: 2, gguf.GGUFValueType.INT16: 2,
          gguf.GGUFValueType.UINT32: 4, gguf.GGUFValueType.INT32: 4,
          gguf.GGUFValueType.FLOAT32: 4, gguf.GGUFValueType.BOOL: 1,
          gguf.GGUFValueType.UINT64: 8, gguf.GGUFValueType.INT64: 8,
          gguf.GGUFValueType.FLOAT64: 8}


def _vocab_kv(name: str) -> dict[str, _Value]:
    """The `tokenizer.*` metadata of a vendored vocabulary GGUF (a fresh dict each call)."""
    return dict(_read_tokenizer_kv(vocab(name)))


@cache
def _read_tokenizer_kv(path: Path) -> tuple[tuple[str, _Value], ...]:
    data = path.read_bytes()
    if data[:4] != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    _, _, n_kv = struct.unpack_from("<IQQ", data, 4)
    offset, out = 24, []

    def string(at: int) -> tuple[bytes, int]:
        (n,) = struct.unpack_from("<Q", data, at)
        return data[at + 8:at + 8 + n], at + 8 + n

    for _ in range(n_kv):
        key, offset = string(offset)
        (vtype,) = struct.unpack_from("<I", data, offset)
        offset += 4
        value: Any
        if vtype == gguf.GGUFValueType.STRING:
            value, offset = string(offset)
        elif vtype == gguf.GGUFValueType.ARRAY:
            item_type, count = struct.unpack_from("<IQ", data, offset)
            offset += 12
            if item_type == gguf.GGUFValueType.STRING:
                value = []
                for _ in range(count):
                    item, offset = string(offset)
                    value.append(item)
                value = tuple(value)
            else:
                size = count * _SIZES[item_type]
                value, offset = _Array(item_type, data[offset:offset + size]), offset + size
        else:
            size = _SIZES[vtype]
            value, offset = data[offset:offset + size], offset + size
        if key.startswith(b"tokenizer."):
            out.append((key.decode(), (vtype, value)))
    return tuple(out)
