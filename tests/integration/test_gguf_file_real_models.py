"""GGUF metadata of the real models, and real files cut short."""

from pathlib import Path

import pytest

from app.gguf_file import read_gguf
from backends.errors import ModelFileError


def test_reads_real_qwen_metadata(qwen):
    info = read_gguf(qwen.path)
    assert info.architecture == "qwen2"
    assert info.arch_value("block_count") == 24
    assert info.file_type == "Q4_K_M"
    assert info.context_length == 32768
    assert info.chat_template and "<|im_start|>" in info.chat_template
    # 24 layers x 2 KV heads x (64 + 64) x 2 bytes (f16)
    assert info.kv_bytes_per_token == 24 * 2 * 128 * 2


def test_reads_real_gemma_sliding_window_metadata(gemma):
    info = read_gguf(gemma.path)
    assert info.architecture == "gemma3"
    assert info.arch_value("attention.sliding_window") == 512
    assert info.chat_template is None


def test_truncated_in_tensor_data(tmp_path: Path, qwen):
    cut = tmp_path / "cut.gguf"
    with qwen.path.open("rb") as src:
        cut.write_bytes(src.read(50_000_000))
    with pytest.raises(ModelFileError, match=r"truncated GGUF: tensor data needs 491,400,064 "
                                             r"bytes, the file has 50,000,000"):
        read_gguf(cut)


def test_truncated_in_header(tmp_path: Path, qwen):
    cut = tmp_path / "cut.gguf"
    with qwen.path.open("rb") as src:
        cut.write_bytes(src.read(100_000))
    with pytest.raises(ModelFileError, match="truncated (or corrupt )?GGUF"):
        read_gguf(cut)
