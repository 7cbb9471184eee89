"""backends/gguf_tensors.py on the real Qwen2.5-Coder-0.5B Q4_K_M file: our reader finds the
fields and tensors Ember's own header walk does (app/gguf_file.py), and ggml's converters give
the floats of the `gguf` package's dequantization (Q8_0, Q5_0, Q6_K, Q4_K and F32 here)."""

from __future__ import annotations

import numpy as np
from gguf.quants import dequantize

from app.gguf_file import read_gguf
from backends.gguf_tensors import FastGGUFReader, _to_float, tensor_to_float32


def test_tensors_read_and_converted_by_ggml_equal_the_gguf_packages(qwen):
    ours, header = FastGGUFReader(qwen.path), read_gguf(qwen.path)
    assert len(ours.tensors) == header.tensor_count
    assert sum(int(t.n_elements) for t in ours.tensors) == header.params
    for key in ("general.architecture", "qwen2.block_count", "qwen2.context_length"):
        assert ours.fields[key].contents() == header.metadata[key]
    assert len(ours.fields["tokenizer.ggml.tokens"].contents()) == 151936
    checked = set()
    for t in ours.tensors:  # every tensor of blocks 0 and 23, the embedding and the output
        if not t.name.startswith(("blk.0.", "blk.23.", "token_embd", "output")):
            continue
        mine = tensor_to_float32(t)
        assert mine.dtype == np.float32 and mine.flags.writeable and mine.flags.owndata
        assert np.array_equal(mine, dequantize(t.data, t.tensor_type)), t.name
        checked.add(t.tensor_type.name)
    assert checked == {"Q8_0", "Q5_0", "Q6_K", "Q4_K", "F32"}
    assert all(_to_float(int(t)) is not None for t in (8, 6, 14, 12))  # ggml's, not numpy's
