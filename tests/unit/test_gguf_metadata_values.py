"""GGUF metadata of the wrong type or value (a corrupt or hand-made file) is one clear
ModelFileError naming the key, never a ZeroDivisionError or a TypeError from deep inside."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from app.fit.estimate import arch_from_gguf
from app.gguf_file import read_gguf
from backends.errors import ModelFileError


def _write(path: Path, **values: int | str) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_head_count(2)
    writer.add_embedding_length(8)
    for key, value in values.items():
        key = key.replace("__", ".")
        if isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_uint32(key, value)
    writer.add_tensor("token_embd.weight", np.zeros((8, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_an_alignment_of_zero_is_a_clear_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "zero.gguf", general__alignment=0)
    with pytest.raises(ModelFileError, match=r"zero\.gguf: corrupt GGUF: general\.alignment is 0"):
        read_gguf(path)


def test_a_text_where_a_number_belongs_names_the_key(tmp_path: Path) -> None:
    info = read_gguf(_write(tmp_path / "text.gguf", llama__context_length="long"))
    with pytest.raises(ModelFileError, match=r"text\.gguf: llama\.context_length is 'long', "
                                             r"not a number"):
        _ = info.context_length


def test_numbers_read_as_numbers_and_absent_ones_as_their_defaults(tmp_path: Path) -> None:
    info = read_gguf(_write(tmp_path / "ok.gguf", llama__attention__sliding_window=4))
    assert info.context_length == 2048  # absent: the default
    assert info.file_type == "unknown"  # absent
    arch = arch_from_gguf(info)
    assert (arch.layers, arch.heads, arch.hidden, arch.head_dim) == (1, 2, 8, 4)
    assert arch.sliding_window == 4 and arch.vocab == 32000  # no tokenizer in the file
