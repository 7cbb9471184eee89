"""The cuda engine's tokenizer for a Hugging Face directory (backends/cuda/tokenizer.py), on a
tiny word-level tokenizer.json written by the `tokenizers` library: the BOS token its config
asks for, by id, and a BOS the vocabulary lacks refused at load with the file named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from backends.cuda.tokenizer import load_tokenizer
from backends.errors import ModelFileError

VOCAB = {"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4}


def _model_dir(tmp_path: Path, config: dict[str, object]) -> Path:
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<s>", "</s>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_a_config_asking_for_bos_gets_the_bos_id_first(tmp_path: Path):
    tok = load_tokenizer(_model_dir(tmp_path, {
        "add_bos_token": True, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}))
    assert tok.encode("hello world") == [1, 3, 4]
    assert tok.encode("<s> hello") == [1, 3]  # the text's own BOS, not a second one
    assert tok.is_eog(2) and not tok.is_eog(3)


def test_no_bos_unless_the_config_asks(tmp_path: Path):
    tok = load_tokenizer(_model_dir(tmp_path, {"bos_token": "<s>", "eos_token": "</s>"}))
    assert tok.encode("hello world") == [3, 4]


def test_a_bos_token_missing_from_the_vocabulary_is_refused_at_load(tmp_path: Path):
    with pytest.raises(ModelFileError, match=r"BOS token '<bos>' is not in tokenizer.json"):
        load_tokenizer(_model_dir(tmp_path, {"add_bos_token": True, "bos_token": "<bos>"}))
