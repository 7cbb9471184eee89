"""The BERT converter on a tiny sentence-transformers folder (tests.support.tiny_bert): the
GGUF llama.cpp's own converter would write, read back with gguf-py's reader."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from app.pull.bert_to_gguf import ConversionError, convert
from tests.support.tiny_bert import VOCAB, write_tiny_bert


def field(reader: gguf.GGUFReader, key: str):
    return reader.fields[key].contents()


@pytest.fixture
def converted(tmp_path: Path) -> gguf.GGUFReader:
    folder = write_tiny_bert(tmp_path / "tiny")
    return gguf.GGUFReader(convert(folder, tmp_path / "tiny.gguf", "Tiny BERT"))


def test_metadata_says_bert_with_mean_pooling_and_no_causal_mask(converted):
    assert field(converted, "general.architecture") == "bert"
    assert field(converted, "general.name") == "Tiny BERT"
    assert field(converted, "bert.pooling_type") == gguf.PoolingType.MEAN
    assert field(converted, "bert.attention.causal") is False
    assert field(converted, "bert.block_count") == 1
    assert field(converted, "bert.context_length") == 16
    assert field(converted, "tokenizer.ggml.token_type_count") == 2
    assert field(converted, "tokenizer.ggml.model") == "bert"
    assert field(converted, "tokenizer.ggml.bos_token_id") == 3  # [CLS]
    assert field(converted, "tokenizer.ggml.seperator_token_id") == 4  # [SEP]: gguf's spelling


def test_vocabulary_is_in_phantom_space_form(converted):
    tokens = field(converted, "tokenizer.ggml.tokens")
    types = field(converted, "tokenizer.ggml.token_type")
    assert len(tokens) == len(VOCAB)
    assert tokens[3] == "[CLS]" and types[3] == gguf.TokenType.CONTROL
    assert tokens[VOCAB.index("cat")] == "\u2581cat"
    assert tokens[VOCAB.index("##s")] == "s"
    # an ordinary vocabulary entry in brackets is a word like any other, as upstream has it
    assert tokens[1] == "\u2581[unused0]" and types[1] == gguf.TokenType.NORMAL


def test_matrices_are_f16_and_what_llama_cpp_reads_in_f32_is_f32(converted):
    types = {t.name: t.tensor_type for t in converted.tensors}
    F16, F32 = gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32
    assert types["token_embd.weight"] == F16
    assert types["blk.0.attn_q.weight"] == types["blk.0.ffn_down.weight"] == F16
    assert types["position_embd.weight"] == types["token_types.weight"] == F32
    assert types["token_embd_norm.weight"] == types["blk.0.layer_output_norm.weight"] == F32
    assert types["blk.0.attn_q.bias"] == types["blk.0.ffn_up.bias"] == F32
    assert not any("pooler" in name or "position_ids" in name for name in types)
    assert len(types) == 5 + 16  # embeddings + norm, token types; 16 per layer


def test_the_same_folder_gives_the_same_bytes(tmp_path: Path):
    folder = write_tiny_bert(tmp_path / "tiny")
    first = convert(folder, tmp_path / "a.gguf", "Tiny").read_bytes()
    assert convert(folder, tmp_path / "b.gguf", "Tiny").read_bytes() == first


def test_cls_pooling_is_carried_over(tmp_path: Path):
    folder = write_tiny_bert(tmp_path / "tiny", pooling="pooling_mode_cls_token")
    reader = gguf.GGUFReader(convert(folder, tmp_path / "t.gguf", "Tiny"))
    assert field(reader, "bert.pooling_type") == gguf.PoolingType.CLS


def test_a_cased_tokenizer_is_refused_before_anything_is_written(tmp_path: Path):
    folder = write_tiny_bert(tmp_path / "tiny", lowercase=False)
    with pytest.raises(ConversionError, match="cased; llama.cpp's bert tokenizer lowercases"):
        convert(folder, tmp_path / "t.gguf", "Tiny")
    assert list(tmp_path.glob("t.gguf*")) == []


def test_a_bpe_tokenizer_is_refused(tmp_path: Path):
    folder = write_tiny_bert(tmp_path / "tiny", model_type="BPE")
    with pytest.raises(ConversionError, match="'BPE', not WordPiece"):
        convert(folder, tmp_path / "t.gguf", "Tiny")
