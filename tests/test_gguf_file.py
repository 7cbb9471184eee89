from pathlib import Path

import pytest

from app.gguf_file import read_gguf
from backends.errors import ModelFileError
from tests.support.tiny_gguf import write_tiny_gguf


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


def test_wrong_magic_names_file_and_fault(tmp_path: Path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGML" + bytes(100))
    with pytest.raises(ModelFileError, match=r"model\.gguf: not a GGUF file \(starts with b'GGML'"):
        read_gguf(bad)


def test_random_bytes_are_not_gguf(tmp_path: Path):
    bad = tmp_path / "noise.gguf"
    bad.write_bytes(bytes(range(256)) * 40)
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        read_gguf(bad)


def test_random_bytes_after_a_valid_magic_give_a_clear_error(tmp_path: Path):
    import random

    rng = random.Random(7)
    for i in range(20):
        bad = tmp_path / f"fuzz{i}.gguf"
        bad.write_bytes(b"GGUF\x03\x00\x00\x00" + rng.randbytes(4000))
        with pytest.raises(ModelFileError, match="fuzz"):
            read_gguf(bad)


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


def test_unknown_architecture(tmp_path: Path):
    path = write_tiny_gguf(tmp_path / "odd.gguf", arch="frobnicator")
    with pytest.raises(ModelFileError, match="unknown model architecture 'frobnicator'"):
        read_gguf(path)


def test_missing_file(tmp_path: Path):
    with pytest.raises(ModelFileError, match="no such file"):
        read_gguf(tmp_path / "absent.gguf")
