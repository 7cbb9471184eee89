"""A quantized MLX model's weights unpacked to float (LoadPlan.unpack_weights): on the CPU,
OpenBLAS multiplies float32 weights about 20x faster than mlx's quantized matmul
(backends/mlx_blas.py).

mlx-lm's `dequantize_model` does the same through `mx.dequantize`, which mlx[cpu] runs on
one core: 25 s for the 1.5B's weights on the 2-core AMD EPYC. The affine 4- and 8-bit
layouts (mlx-community's, and `ember convert`'s) are unpacked here with element-wise MLX
operations instead, 7x faster and equal to `mx.dequantize` to the bit
(tests/unit/test_mlx_unpack.py); other layouts go through `mx.dequantize`.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten
from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear


def dequantized(weight: mx.array, scales: mx.array, biases: mx.array | None, group_size: int,
                bits: int, mode: str = "affine") -> mx.array:
    """`mx.dequantize(weight, scales, biases, group_size, bits, mode)`, in the scales' type."""
    if mode != "affine" or bits not in (4, 8) or biases is None:
        return mx.dequantize(weight, scales, biases, group_size, bits, mode)
    codes = weight.view(mx.uint8)  # little-endian: the first value in the lowest bits
    if bits == 4:
        codes = mx.stack([codes & 0xF, codes >> 4], axis=-1).reshape(*codes.shape[:-1], -1)
    groups = codes.reshape(*codes.shape[:-1], -1, group_size).astype(scales.dtype)
    return (groups * scales[..., None] + biases[..., None]).reshape(*codes.shape[:-1], -1)


def unpack_weights(model: nn.Module) -> None:
    """Each quantized layer of `model` replaced by its float layer (mlx-lm's
    `dequantize_model`, with `dequantized`); evaluated here, so the load pays for it."""
    layers: list[tuple[str, Any]] = []
    for name, module in model.named_modules():
        bias = "bias" in module
        if isinstance(module, nn.QuantizedLinear):
            float_layer: Any = nn.Linear(1, 1, bias=bias)
        elif isinstance(module, nn.QuantizedEmbedding):
            float_layer = nn.Embedding(1, 1)
        elif isinstance(module, QuantizedSwitchLinear):
            float_layer = SwitchLinear(1, 1, 1, bias=bias)
        else:
            continue
        float_layer.weight = dequantized(module.weight, module.scales,
                                         module.get("biases"), module.group_size,
                                         module.bits, getattr(module, "mode", "affine"))
        if bias:
            float_layer.bias = module.bias
        layers.append((name, float_layer))
    if layers:
        model.update_modules(tree_unflatten(layers))
    mx.eval(model.parameters())
