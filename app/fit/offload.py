"""Where llama.cpp puts a GGUF model's parts with `n_gpu_layers` (the llama.cpp that
llama-cpp-python 0.3.36 vendors, src/llama-model.cpp `load_tensors`): the token embedding
always on the CPU; with n_gpu_layers = N >= 1 the output layer (output.weight, or a copy of
the token embedding where the two are tied) and the LAST N - 1 repeating layers on the GPU,
each layer's KV cache with its layer. So a plan with n repeating layers on the GPU asks for
n + 1. Docs: docs/notes/fit-model.md, "GPU offload".
"""

from __future__ import annotations

from dataclasses import dataclass

from app.registry import Arch

UBATCH = 512
# Bytes per K or V value by the KV cache's type: a q8_0 block holds 32 values in 34 bytes
# (32 int8 and a 16-bit scale), ggml's block_q8_0.
KV_BYTES = {"f16": 2.0, "q8_0": 34 / 32}


@dataclass(frozen=True)
class Parts:
    """A model's weights by where llama.cpp may put them, in bytes."""
    embedding: int  # token_embd: on the CPU, read a row a token (get_rows)
    output: int  # on the output layer's device: output.weight, or token_embd's copy if tied
    layer: float  # one repeating layer (norms included)
    tied: bool

    def on_gpu(self, n: int) -> int:
        """Weights in GPU memory with n repeating layers offloaded (n >= 1)."""
        return self.output + round(n * self.layer) if n > 0 else 0

    def in_ram(self, n: int, layers: int) -> int:
        return self.embedding + round((layers - n) * self.layer)


def parts(arch: Arch, params: int, weights: int, embedding: int | None = None,
          output: int | None = None, output_bits: float | None = None) -> Parts:
    """`embedding`, `output`: the file's token_embd and output.weight bytes when the file is
    at hand; else each is vocab x hidden parameters, the output at `output_bits` (the type
    llama.cpp's quantize gives it; a tied embedding gets the same) and the embedding at the
    file's average bytes a parameter. A tied output has no tensor of its own: llama.cpp
    duplicates token_embd for it."""
    per_param = weights / params if params else 0.0
    out_per_param = output_bits / 8 if output_bits else per_param
    tied = arch.tied_embeddings or output == 0
    estimated = int(arch.vocab * arch.hidden * (out_per_param if tied else per_param))
    embd = estimated if embedding is None else embedding
    out_estimated = int(arch.vocab * arch.hidden * out_per_param)
    out_in_file = 0 if tied else (out_estimated if output is None else output)
    layer = max(0, weights - embd - out_in_file) / max(arch.layers, 1)
    return Parts(embd, embd if tied else out_in_file, layer, tied)


def layer_cells(arch: Arch, context: int) -> list[int]:
    """KV cells of each layer, in llama.cpp's order: a sliding-window layer holds
    min(context, window + ubatch), a global one the whole context. Layer il is global when
    il % pattern == pattern - 1 (Gemma 3: every 6th)."""
    if not (arch.sliding_window and arch.sliding_pattern):
        return [context] * arch.layers
    local = min(context, arch.sliding_window + UBATCH)
    p = arch.sliding_pattern
    return [context if il % p == p - 1 else local for il in range(arch.layers)]


def kv_bytes(arch: Arch, cells: int, parallel: int = 1, kv: str = "f16") -> int:
    """K and V of `cells` cells summed over layers, for `parallel` sequences."""
    return int(2 * arch.kv_heads * arch.head_dim * KV_BYTES[kv] * cells * parallel)


def kv_split(arch: Arch, context: int, n: int, parallel: int = 1,
             kv: str = "f16") -> tuple[int, int]:
    """(GPU, CPU) bytes of the KV cache with the last n layers on the GPU."""
    cells = layer_cells(arch, context)
    cut = arch.layers - n
    return (kv_bytes(arch, sum(cells[cut:]), parallel, kv),
            kv_bytes(arch, sum(cells[:cut]), parallel, kv))
