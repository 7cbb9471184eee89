"""Fused projections: a layer's q/k/v weights as one `attn.qkv` and gate/up as one `mlp.gate_up`,
so a decode step launches one GEMV where it launched three (two), each reading a longer
weight (nano-vllm's QKVParallelLinear / MergedColumnParallelLinear, vLLM's packed modules).

The loader converts each tensor on its own (GGUF Q8_0/Q4_K blocks, llama's Q/K row
permutation, quantization), and this concatenates them afterwards along the output
dimension, in any layout (kernels.quant.concat_outputs). Biases (Qwen2's q/k/v) follow the
weights. The model splits the output back with views, so nothing is copied at run time.
"""

from __future__ import annotations

import torch

from kernels.quant import Fp8Weight, Int4Weight, Int8Weight, PackedWeight, concat_outputs

Tensor = torch.Tensor | PackedWeight
FUSED = {"attn.qkv": ("attn.q", "attn.k", "attn.v"), "mlp.gate_up": ("mlp.gate", "mlp.up")}


def _cat(name: str, parts: list[Tensor]) -> Tensor:
    packed = [p for p in parts if isinstance(p, Int8Weight | Int4Weight | Fp8Weight)]
    try:
        if len(packed) == len(parts):
            return concat_outputs(packed)
        if packed:
            raise ValueError("some are packed and some are not")
        tensors = [p for p in parts if isinstance(p, torch.Tensor)]
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) != 1:
            raise ValueError(f"their dtypes differ ({sorted(map(str, dtypes))})")
        return torch.cat(tensors, dim=0)
    except (ValueError, RuntimeError) as e:
        from backends.errors import ModelFileError
        raise ModelFileError(f"cannot fuse the weights of {name}: {e}") from e


def fuse_projections(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """`tensors` with every layer's q/k/v (gate/up) weights and biases replaced by their
    concatenation under the fused name; already fused names pass through."""
    out = dict(tensors)
    for name in tensors:
        for fused, parts in FUSED.items():
            first = f".{parts[0]}."
            if first not in name or not name.startswith("layers."):
                continue
            prefix, _, kind = name.partition(first)  # kind: "weight" or "bias"
            names = [f"{prefix}.{p}.{kind}" for p in parts]
            missing = [n for n in names if n not in tensors]
            if missing:
                from backends.errors import ModelFileError
                raise ModelFileError(f"{name} has no partner tensors {missing} to fuse with")
            out[f"{prefix}.{fused}.{kind}"] = _cat(f"{prefix}.{fused}.{kind}",
                                                   [tensors[n] for n in names])
            for n in names:
                del out[n]
    return out
