"""A sentence-transformers BERT folder (config.json, model.safetensors, tokenizer.json,
modules.json + 1_Pooling/config.json) as a GGUF that llama.cpp runs as arch `bert`.

This follows llama.cpp's own converter, `convert_hf_to_gguf.py` class `BertModel` (in
ggml-org/llama.cpp `conversion/bert.py` and `conversion/base.py`), so the file is the one a
hub user would make with `convert_hf_to_gguf.py --outtype f16`:
- the WordPiece vocabulary in "phantom space" form: control tokens ([CLS], [SEP] ...) as they
  are, a continuation `##x` as `x`, every other token as U+2581 + token (llama.cpp's WPM
  tokenizer marks a word start with U+2581), tokenizer model `bert`, the token types;
- `bert.pooling_type` from the Pooling module (MEAN for all-MiniLM-L6-v2), non-causal
  attention, the token-type count (llama.cpp checks the token_types tensor against it);
- tensor names from gguf-py's `TensorNameMap` for MODEL_ARCH.BERT; matrices in F16, and in
  F32 what llama.cpp needs in F32: 1-D tensors (norms, biases), position and token-type
  embeddings (the converter's "always float32" list);
- the pooler and masked-LM heads are left out (the embedding graph does not read them).

No transformers is needed: tokenizer.json gives the vocabulary and gguf-py's `SpecialVocab`
the special tokens, as in the converter. The output is deterministic: the same folder gives
the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from backends.errors import EmberError

ARCH = gguf.MODEL_ARCH.BERT
# llama.cpp's converter names this pre-tokenizer "bert-bge" (its hash of BERT uncased
# WordPiece); llama.cpp's WPM vocabulary does not read it, but the key is expected.
TOKENIZER_PRE = "bert-bge"
POOLING = {"pooling_mode_mean_tokens": gguf.PoolingType.MEAN,
           "pooling_mode_cls_token": gguf.PoolingType.CLS,
           "pooling_mode_lasttoken": gguf.PoolingType.LAST}
# tensors of a BertModel checkpoint that the embedding graph never reads
SKIPPED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
SKIPPED_PREFIXES = ("cls.predictions", "cls.seq_relationship")
ALWAYS_F32 = (gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES)


class ConversionError(EmberError):
    """A folder that is not a BERT sentence-transformers model this converter handles."""


@dataclass(frozen=True)
class Vocabulary:
    tokens: list[str]
    types: list[gguf.TokenType]


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConversionError(f"{path}: cannot read it ({e})") from e


def read_vocabulary(folder: Path, vocab_size: int) -> Vocabulary:
    """The converter's `get_vocab_base` for a WordPiece tokenizer.json: ids the vocabulary
    lacks become `[PAD<id>]` (UNUSED), added special tokens CONTROL, other added tokens
    USER_DEFINED, the rest NORMAL; then the phantom-space form."""
    tok = _json(folder / "tokenizer.json")
    model = tok.get("model") or {}
    if model.get("type") != "WordPiece":
        raise ConversionError(f"{folder}: the tokenizer is {model.get('type')!r}, not WordPiece "
                              "(llama.cpp's bert tokenizer is WordPiece)")
    normalizer = tok.get("normalizer") or {}
    if normalizer.get("type") == "BertNormalizer" and not normalizer.get("lowercase", True):
        # llama.cpp's WPM tokenizer always lowercases: a cased model would get wrong ids
        raise ConversionError(f"{folder}: the tokenizer is cased; llama.cpp's bert tokenizer "
                              "lowercases every text, so this model would read wrong tokens")
    by_id = {int(i): t for t, i in model["vocab"].items()}
    added = {int(a["id"]): a for a in tok.get("added_tokens", ())}
    for i, a in added.items():
        by_id[i] = a["content"]
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        if i in added:
            types.append(gguf.TokenType.CONTROL if added[i].get("special")
                         else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(by_id[i])
    return Vocabulary([_phantom(t, k) for t, k in zip(tokens, types, strict=True)], types)


def _phantom(token: str, kind: gguf.TokenType) -> str:
    if kind == gguf.TokenType.CONTROL:
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def pooling_type(folder: Path) -> gguf.PoolingType:
    """The Pooling module's mode, as the converter's `_try_set_pooling_type` reads it."""
    modules = _json(folder / "modules.json")
    pooling = next((m for m in modules if m.get("type", "").endswith(".Pooling")), None)
    if pooling is None:
        raise ConversionError(f"{folder}: modules.json has no Pooling module")
    config = _json(folder / pooling["path"] / "config.json")
    modes = [mode for key, mode in POOLING.items() if config.get(key)]
    if len(modes) != 1:
        raise ConversionError(f"{folder}: pooling {config} is not one mode llama.cpp has "
                              "(mean, cls or last token)")
    return modes[0]


def _gguf_name(names: gguf.TensorNameMap, name: str) -> str | None:
    if name.startswith("bert."):
        name = name[len("bert."):]
    if name.endswith(".gamma"):
        name = name[:-len(".gamma")] + ".weight"
    if name.endswith(".beta"):
        name = name[:-len(".beta")] + ".bias"
    if name in SKIPPED or name.startswith(SKIPPED_PREFIXES):
        return None
    mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
    if mapped is None:
        raise ConversionError(f"tensor {name!r} is not one of llama.cpp's BERT tensors")
    return mapped


def _stored(gguf_name: str, data: np.ndarray) -> np.ndarray:
    """F16 for matrices; F32 for what llama.cpp keeps in F32 (see the module's docstring)."""
    f32 = (data.ndim <= 1 or gguf_name.endswith("_norm.weight")
           or not gguf_name.endswith(".weight")
           or any(gguf_name.startswith(gguf.TENSOR_NAMES[t]) for t in ALWAYS_F32))
    return data.astype(np.float32 if f32 else np.float16)


def convert(folder: Path, out: Path, name: str) -> Path:
    """Write `out` (a GGUF, F16 matrices) from the sentence-transformers BERT `folder`."""
    from safetensors.numpy import load_file  # the pull's dependency, not the app start's

    config = _json(folder / "config.json")
    if config.get("model_type") != "bert":
        raise ConversionError(f"{folder}: model_type is {config.get('model_type')!r}, not bert")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ConversionError(f"{folder}: activation {config['hidden_act']!r}; llama.cpp's bert "
                              "graph uses GELU")
    layers = int(config["num_hidden_layers"])
    vocab = read_vocabulary(folder, int(config["vocab_size"]))
    try:
        weights = load_file(str(folder / "model.safetensors"))
    except (OSError, ValueError) as e:
        raise ConversionError(f"{folder / 'model.safetensors'}: cannot read it ({e})") from e

    tmp = out.with_name(out.name + ".tmp")  # a cut-off conversion never looks finished
    writer = gguf.GGUFWriter(str(tmp), gguf.MODEL_ARCH_NAMES[ARCH])
    writer.add_name(name)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_block_count(layers)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config.get("num_key_value_heads",
                                            config["num_attention_heads"])))
    writer.add_layer_norm_eps(float(config["layer_norm_eps"]))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_causal_attention(False)
    writer.add_pooling_type(pooling_type(folder))

    writer.add_token_type_count(int(config.get("type_vocab_size", 1)))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre(TOKENIZER_PRE)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    gguf.SpecialVocab(folder, n_vocab=len(vocab.tokens)).add_to_gguf(writer, quiet=True)

    names = gguf.get_tensor_name_map(ARCH, layers)
    for key in sorted(weights):  # sorted: the same folder always gives the same file
        target = _gguf_name(names, key)
        if target is not None:
            writer.add_tensor(target, _stored(target, weights[key]))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
