"""Files that are not the GGUF they claim to be: each is one clear ModelFileError."""

from pathlib import Path

import pytest

from app.gguf_file import read_gguf
from backends.errors import ModelFileError
from tests.support.tiny_gguf import write_tiny_gguf


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


def test_unknown_architecture(tmp_path: Path):
    path = write_tiny_gguf(tmp_path / "odd.gguf", arch="frobnicator")
    with pytest.raises(ModelFileError, match="unknown model architecture 'frobnicator'"):
        read_gguf(path)


def test_missing_file(tmp_path: Path):
    with pytest.raises(ModelFileError, match="no such file"):
        read_gguf(tmp_path / "absent.gguf")


def _vocab_gguf(path: Path, tokens: list[str]) -> Path:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_token_list(tokens)
    writer.add_block_count(len(tokens[0]))  # differs with the tokens: shows which was read
    writer.add_tensor("token_embd.weight", np.zeros(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_long_vocabulary_walked_once_is_recognised_only_when_its_bytes_match(tmp_path):
    from app import gguf_file

    gguf_file._SKIPPED.clear()
    count = gguf_file.REMEMBERED_ARRAY
    short = _vocab_gguf(tmp_path / "a.gguf", [f"t{i:05d}" for i in range(count)])
    same = _vocab_gguf(tmp_path / "b.gguf", [f"t{i:05d}" for i in range(count)])
    longer = _vocab_gguf(tmp_path / "c.gguf", [f"tok{i:07d}" for i in range(count)])
    assert read_gguf(short).arch_int("block_count", 0) == 6
    assert list(gguf_file._SKIPPED) == [count]  # remembered by its item count
    assert read_gguf(same).arch_int("block_count", 0) == 6  # skipped by its digest
    # the same count, other bytes: walked, not taken for the one remembered
    info = read_gguf(longer)
    assert info.arch_int("block_count", 0) == 10 and info.metadata["tokenizer.ggml.tokens"] == count
    truncated = tmp_path / "d.gguf"
    truncated.write_bytes(longer.read_bytes()[:50_000])
    with pytest.raises(ModelFileError, match="truncated GGUF"):
        read_gguf(truncated)
