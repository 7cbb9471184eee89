"""backends/mlx/unpack.py: a quantized model's weights unpacked to float equal
`mx.dequantize` to the bit, and the unpacked model computes what the packed one does."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from backends.mlx.unpack import dequantized, unpack_weights


@pytest.mark.parametrize("bits", [4, 8, 6])
@pytest.mark.parametrize("shape", [(96, 256), (3, 64, 128)])  # a layer; a SwitchLinear's
def test_unpacking_equals_mx_dequantize_to_the_bit(bits, shape):
    w = mx.random.normal(shape, key=mx.random.key(bits))
    q, scales, biases = mx.quantize(w, group_size=64, bits=bits)
    scales, biases = scales.astype(mx.float32), biases.astype(mx.float32)
    ours = dequantized(q, scales, biases, 64, bits)
    reference = mx.dequantize(q, scales, biases, 64, bits)
    assert ours.shape == reference.shape == w.shape and ours.dtype == mx.float32
    assert np.array_equal(np.array(ours), np.array(reference))


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 128)
        self.proj = nn.Linear(128, 64, bias=True)

    def __call__(self, tokens: mx.array) -> mx.array:
        h = self.proj(self.embed(tokens))
        return self.embed.as_linear(mx.concatenate([h, h], axis=-1))


def test_an_unpacked_model_computes_what_the_packed_one_does():
    model = Tiny()
    nn.quantize(model, group_size=64, bits=4)
    model.set_dtype(mx.float32)
    tokens = mx.array([[1, 5, 99]])
    packed = np.array(model(tokens))
    unpack_weights(model)
    assert isinstance(model.proj, nn.Linear) and not isinstance(model.proj, nn.QuantizedLinear)
    assert type(model.embed) is nn.Embedding and model.proj.weight.dtype == mx.float32
    assert np.allclose(np.array(model(tokens)), packed, rtol=1e-4, atol=1e-4)
