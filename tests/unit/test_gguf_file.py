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
