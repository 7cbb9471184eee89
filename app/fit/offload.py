"""Where llama.cpp puts a GGUF model's parts with `n_gpu_layers` (the llama.cpp that
llama-cpp-python 0.3.36 vendors, src/llama-model.cpp `load_tensors`): the token embedding
always on the CPU; with n_gpu_layers = N >= 1 the output layer (output.weight, or a copy of
the token embedding where the two are tied) and the LAST N - 1 repeating layers on the GPU,
each layer's KV cache with its layer. So a plan with n repeating layers on the GPU asks for
n + 1. Here: llama.cpp's memory parts (weights by place, KV cache by layer, compute buffers),
the bytes each device holds with n layers offloaded, the plan (how many), and the bytes each
device reads a token. Docs: docs/notes/fit-model.md, "GPU offload".
"""

from __future__ import annotations

from dataclasses import dataclass

from app.fit.base import TYPICAL_FILL, Memory
from app.registry import Arch

UBATCH = 512
OVERHEAD_BYTES = 112 << 20  # worker process baseline (docs/notes/fit-model.md)
BUFFER_FIXED_BYTES = 4 << 20
BUFFER_PER_CONTEXT_BYTES = 256

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


def is_recurrent(arch: Arch, il: int) -> bool:
    """Layer il of a hybrid model is linear attention (no KV cache): all but every Nth
    (llama.cpp's qwen35: recurrent unless (il + 1) % full_attention_interval == 0)."""
    n = arch.full_attention_interval
    return n is not None and n > 0 and il % n != n - 1


def state_bytes(arch: Arch) -> int:
    """One sequence's recurrent state in one linear-attention layer, float32 as llama.cpp
    keeps it: the convolution's last kernel - 1 inputs of q, k and v (n_embd_r) and the delta
    rule's key x value matrix per value head (n_embd_s)."""
    if not arch.full_attention_interval:
        return 0
    d = arch.linear_head_dim or 0
    keys, values = arch.linear_key_heads or 0, arch.linear_value_heads or 0
    conv = max(0, (arch.linear_conv_kernel or 1) - 1) * (2 * keys * d + values * d)
    return 4 * (conv + values * d * d)


def state_split(arch: Arch, n: int, parallel: int = 1) -> tuple[int, int]:
    """(GPU, CPU) bytes of the recurrent states with the last n layers on the GPU."""
    cut = arch.layers - n
    per_layer = state_bytes(arch) * max(1, parallel)
    gpu = sum(is_recurrent(arch, il) for il in range(cut, arch.layers))
    cpu = sum(is_recurrent(arch, il) for il in range(cut))
    return gpu * per_layer, cpu * per_layer


def layer_cells(arch: Arch, context: int) -> list[int]:
    """KV cells of each layer, in llama.cpp's order: a sliding-window layer holds
    min(context, window + ubatch), a global one the whole context. Layer il is global when
    il % pattern == pattern - 1 (Gemma 3: every 6th). A hybrid model's linear-attention
    layers hold none (their fixed state: state_bytes)."""
    if arch.full_attention_interval:
        return [0 if is_recurrent(arch, il) else context for il in range(arch.layers)]
    if not (arch.sliding_window and arch.sliding_pattern):
        return [context] * arch.layers
    local = min(context, arch.sliding_window + UBATCH)
    p = arch.sliding_pattern
    return [context if il % p == p - 1 else local for il in range(arch.layers)]


def cell_values(arch: Arch) -> int:
    """K and V values one cell of a layer holds (Gemma 4's global layers: kv_width): each KV
    head's key and value. With MLA, llama.cpp (0.3.36's vendored src) caches one K row of the
    latent and the rotary key and no V: the deepseek2 GGUF has head_count_kv 1 and
    key_length kv_lora_rank + rope dimension (conversion/deepseek.py), n_embd_k_gqa is their
    product (src/llama-hparams.cpp), and src/llama-kv-cache.cpp allocates V only where
    !is_mla (src/llama-graph.cpp's build_attn for a K-only input reads V as a view of K's
    first kv_lora_rank values)."""
    if arch.kv_lora_rank:
        return arch.kv_lora_rank + (arch.rope_head_dim or 0)
    return arch.kv_heads * (arch.head_dim + (arch.v_head_dim or arch.head_dim))


def kv_bytes(arch: Arch, cells: int, parallel: int = 1, kv: str = "f16") -> int:
    """K and V of `cells` cells summed over layers, for `parallel` sequences."""
    return int(cell_values(arch) * KV_BYTES[kv] * cells * parallel)


def is_global(arch: Arch, il: int) -> bool:
    """Layer il attends over the whole context (every layer without a sliding window)."""
    p = arch.sliding_pattern
    return not (arch.sliding_window and p) or il % p == p - 1


def kv_width(arch: Arch, il: int) -> int:
    """K (and V) values a cell of layer il holds: Gemma 4's global layers have KV heads and a
    head width of their own (llama.cpp keeps V beside K even where the model reuses K as V)."""
    if arch.global_head_dim and is_global(arch, il):
        return (arch.global_kv_heads or arch.kv_heads) * arch.global_head_dim
    return arch.kv_heads * arch.head_dim


def layers_kv_bytes(arch: Arch, cells: list[int], first: int, parallel: int = 1,
                    kv: str = "f16") -> int:
    """K and V of the layers first, first + 1, ... holding `cells` cells each."""
    if not arch.global_head_dim:
        return kv_bytes(arch, sum(cells), parallel, kv)
    values = sum(kv_width(arch, first + i) * c for i, c in enumerate(cells))
    return int(2 * KV_BYTES[kv] * values * parallel)


def kv_split(arch: Arch, context: int, n: int, parallel: int = 1,
             kv: str = "f16") -> tuple[int, int]:
    """(GPU, CPU) bytes of the KV cache (and of a hybrid model's recurrent states) with the
    last n layers on the GPU."""
    cells = layer_cells(arch, context)
    cut = arch.layers - n
    gpu_state, cpu_state = state_split(arch, n, parallel)
    return (layers_kv_bytes(arch, cells[cut:], cut, parallel, kv) + gpu_state,
            layers_kv_bytes(arch, cells[:cut], 0, parallel, kv) + cpu_state)


def buffer_bytes(arch: Arch, context: int, on_gpu: bool) -> int:
    fixed = BUFFER_FIXED_BYTES + BUFFER_PER_CONTEXT_BYTES * context
    return UBATCH * arch.vocab * 4 + fixed if on_gpu else fixed


def logits_buffer_bytes(arch: Arch) -> int:
    """The output layer's part of a compute buffer: a ubatch of float32 logits and of the
    hidden state going in (measured on lavapipe: 300.25 MiB for Qwen2.5-Coder 0.5B, 302.75
    for the 1.5B, docs/notes/fit-model.md)."""
    return UBATCH * (arch.vocab + 2 * arch.hidden) * 4


def gpu_buffer_bytes(arch: Arch, context: int, output_on_gpu: bool = True) -> int:
    """llama.cpp's compute buffer on a discrete GPU with flash attention (on wherever the GPU
    backend runs it): a ubatch of the layers' activations (3 x ffn + 2 x the attention
    width, float32) or, with the output layer there, its logits, whichever is larger, and
    the f16 attention masks (global context and sliding window). Measured on lavapipe to
    within 0.5 MiB (docs/notes/fit-model.md, "GPU offload")."""
    width = max(arch.hidden, arch.heads * max(arch.head_dim, arch.global_head_dim or 0))
    activations = UBATCH * (3 * arch.ffn + 2 * width) * 4
    cells = set(layer_cells(arch, context))
    masks = UBATCH * 2 * sum(cells)
    return max(activations, logits_buffer_bytes(arch) if output_on_gpu else 0) + masks


def output_fits(split: Parts, arch: Arch, max_tensor: int | None) -> bool:
    """Whether the output layer can go to the GPU: a Vulkan device refuses any op with a
    tensor over its maxStorageBufferRange (ggml-vulkan's supports_op; lavapipe's is 128 MiB),
    so the output weight and its ubatch of logits must both fit it."""
    return max_tensor is None or max(split.output, UBATCH * arch.vocab * 4) <= max_tensor


def offload_bytes(arch: Arch, split: Parts, context: int, parallel: int, kv: str,
                  n: int, output_on_gpu: bool = True) -> int:
    """GPU memory with the last n repeating layers (and so the output layer, where it fits)
    offloaded: their weights, their KV cache, the GPU compute buffer."""
    if n <= 0:
        return 0
    weights = split.on_gpu(n) - (0 if output_on_gpu else split.output)
    return (weights + kv_split(arch, context, n, parallel, kv)[0]
            + gpu_buffer_bytes(arch, context, output_on_gpu))


def ram_bytes(arch: Arch, split: Parts, context: int, parallel: int, kv: str, n: int,
              output_on_gpu: bool = True) -> int:
    """What must fit in RAM beside n offloaded layers: the token embedding and the CPU's
    layers, their KV cache, the CPU compute buffer and the worker process (the CPU's repack
    copy is reclaimable, as on the CPU alone); an output layer kept on the CPU beside a GPU
    with its logits buffer, which the GPU backend allocates in pinned host memory."""
    kept = 0 if output_on_gpu or n == 0 else split.output + logits_buffer_bytes(arch)
    return (split.in_ram(n, arch.layers) + kv_split(arch, context, n, parallel, kv)[1]
            + buffer_bytes(arch, context, on_gpu=False) + OVERHEAD_BYTES + kept)


def offload_plan(arch: Arch, split: Parts, context: int, parallel: int, kv: str,
                 gpu_budget: int, ram_budget: int, cpu_mem: Memory,
                 forced: int | None = None, output_on_gpu: bool = True) -> tuple[str, int, int]:
    """(placement, repeating layers on the GPU, GPU bytes) on a discrete GPU: all layers when
    they fit the GPU budget (budgets() keeps its headroom), else the most that do and leave
    the rest fitting RAM, else the CPU. `forced`: that many layers, or "will not fit"."""
    layers = arch.layers

    def fits(n: int) -> tuple[bool, int]:
        on_gpu = offload_bytes(arch, split, context, parallel, kv, n, output_on_gpu)
        in_ram = ram_bytes(arch, split, context, parallel, kv, n, output_on_gpu)
        return on_gpu <= gpu_budget and in_ram <= ram_budget, on_gpu

    cpu = ("cpu" if cpu_mem.total <= ram_budget else "wont_fit"), 0, 0
    if forced is not None:
        n = max(0, min(forced, layers))
        if n == 0:
            return cpu
        ok, on_gpu = fits(n)
        return (("full_gpu" if n == layers else "partial") if ok else "wont_fit"), n, on_gpu
    for n in range(layers, 0, -1):
        ok, on_gpu = fits(n)
        if ok:
            return ("full_gpu" if n == layers else "partial"), n, on_gpu
    return cpu


def partial_memory(arch: Arch, context: int, parallel: int, kv: str, n: int,
                   cpu_mem: Memory, repacked: int, output_on_gpu: bool = True) -> Memory:
    """Both devices' bytes of a partial offload (the CPU's repack copy only of its layers;
    the weights are the file's, as in every Fit: a tied output's GPU copy is in gpu_bytes)."""
    gpu_kv, cpu_kv = kv_split(arch, context, n, parallel, kv)
    cpu_share = (arch.layers - n) / arch.layers
    return Memory(weights=cpu_mem.weights,
                  repacked=int(repacked * cpu_share), kv_cache=gpu_kv + cpu_kv,
                  buffers=gpu_buffer_bytes(arch, context, output_on_gpu) + cpu_mem.buffers,
                  overhead=OVERHEAD_BYTES)


def read_split(arch: Arch, split: Parts, context: int, kv: str, n: int,
               unused: float = 0.0, output_on_gpu: bool = True) -> tuple[float, float]:
    """(GPU, CPU) bytes read a decoded token with n layers offloaded: the output layer, each
    layer's active weights and its KV at TYPICAL_FILL; the token embedding's one row is not
    counted. A tied output is token_embd itself, read whole. `unused`: the bytes of a MoE's
    experts not read a token (all in the layers; spread evenly over them, also where leading
    dense layers hold none)."""
    layer = max(0.0, split.layer - unused / max(arch.layers, 1))
    gpu_kv, cpu_kv = kv_split(arch, min(context, TYPICAL_FILL), n, 1, kv)
    out_gpu = n > 0 and output_on_gpu
    gpu = (split.output if out_gpu else 0) + n * layer + gpu_kv if n > 0 else 0.0
    cpu = (arch.layers - n) * layer + cpu_kv + (0 if out_gpu else split.output)
    return gpu, cpu
