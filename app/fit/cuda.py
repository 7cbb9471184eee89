"""The fit model of Ember's own engine (backends/cuda): its memory and speed, which are not
llama.cpp's.

The engine keeps every weight in one dtype (float32 on the CPU, bfloat16 on an NVIDIA GPU,
int8 / int4 for the weight-only kernels), so a 4.85-bit Q4_K_M file takes 16 bits a weight on
the GPU and 32 on the CPU. Its KV cache is counted in 16-token blocks exactly as the runner
allocates them, plus workspace, the torch process and, on a GPU, CUDA graphs and allocator
slack. The speed shares are assumptions, not yet measured: docs/notes/fit-model.md.
"""

from __future__ import annotations

from dataclasses import replace

from app.fit.base import (
    CPU_FLOPS_PER_CORE,
    GB,
    GPU_FLOPS_PER_GBPS,
    TYPICAL_FILL,
    Fit,
    Memory,
    budgets,
    gpu_bandwidth,
    size_load,
)
from app.fit.estimate import arch_from_gguf
from app.gguf_file import GGUFInfo
from app.hardware import HardwareProfile
from app.registry import Arch, Variant
from backends.base import LoadPlan
from backends.cuda.kv_layout import (
    GRAPH_BATCH_SIZES,
    blocks_per_context,
    blocks_per_seq,
    global_blocks,
    pool_slots,
)

MAX_TOKENS = 256  # tokens per engine step the Runtime plans (LoadPlan.batch)
GRAPH_BATCH = GRAPH_BATCH_SIZES[-1]  # the largest decode batch captured as a CUDA graph
TORCH_PROCESS_BYTES = 218 << 20  # RSS after `import torch` (docs/notes/fit-model.md)
ALLOCATOR_SLACK = 0.05  # torch's caching allocator: rounding and fragmentation on a GPU
WEIGHT_BITS = {"float32": 32.0, "bfloat16": 16.0, "float16": 16.0,
               "int8": 8.0,  # one scale per output channel
               "int4": 4.25,  # group 128 with a 16-bit scale and zero point
               "fp8": 8.0}  # e4m3, one float32 scale per output channel
COMPUTE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Share of the bandwidth limit reached at batch-1 decode (assumptions, not yet measured)
EFFICIENCY_CUDA = {"cpu": 0.5, "nvidia": 0.8}


def on_gpu(hw: HardwareProfile) -> bool:
    """Where the engine runs: an NVIDIA GPU with a working torch CUDA, else the CPU."""
    return hw.has_nvidia and hw.torch_cuda is not None


def compute_dtype(hw: HardwareProfile) -> str:
    return "bfloat16" if on_gpu(hw) else "float32"


def weight_bytes(arch: Arch, params: int, weight_dtype: str, dtype: str) -> int:
    embed = arch.vocab * arch.hidden * (1 if arch.tied_embeddings else 2)
    embed = min(embed, params)
    return int((params - embed) * WEIGHT_BITS[weight_dtype] / 8
               + embed * COMPUTE_BYTES[dtype])


def layer_kinds(arch: Arch) -> tuple[int, int]:
    """(global, sliding) layers (a hybrid model's linear-attention layers: neither)."""
    if arch.full_attention_interval:
        return arch.layers // arch.full_attention_interval, 0
    if arch.sliding_window and arch.sliding_pattern:
        glob = arch.layers // arch.sliding_pattern
        return glob, arch.layers - glob
    return arch.layers, 0


def global_width(arch: Arch) -> int:
    """K values a global layer's slot holds (Gemma 4's global layers: their own heads, width)."""
    if arch.global_head_dim:
        return (arch.global_kv_heads or arch.kv_heads) * arch.global_head_dim
    return arch.kv_heads * arch.head_dim


def kv_cache_bytes(arch: Arch, context: int, parallel: int, dtype: str,
                   max_tokens: int = MAX_TOKENS) -> int:
    per_slot = 2 * arch.kv_heads * arch.head_dim * COMPUTE_BYTES[dtype]
    per_global_slot = 2 * global_width(arch) * COMPUTE_BYTES[dtype]
    per_seq = blocks_per_context(context)
    glob, local = layer_kinds(arch)
    window_blocks = 0
    global_slots = pool_slots(global_blocks(context, parallel))
    if local and arch.sliding_window:  # layer_kinds: no sliding layers without a window
        # the engine's window pool (window_pool_size); none when the window spans a context
        window_blocks = blocks_per_seq(arch.sliding_window, max_tokens)
        if window_blocks >= per_seq:  # the sliding layers keep the whole context too
            return per_global_slot * glob * global_slots + per_slot * local * global_slots
    local_slots = pool_slots(window_blocks * parallel) if local else 0
    return per_global_slot * glob * global_slots + per_slot * local * local_slots


def kv_read_bytes(arch: Arch, fill: int, dtype: str) -> int:
    """K and V one decode step reads with `fill` tokens in the context."""
    glob, local = layer_kinds(arch)
    seen = min(fill, arch.sliding_window or fill)
    return 2 * COMPUTE_BYTES[dtype] * (global_width(arch) * glob * fill
                                       + arch.kv_heads * arch.head_dim * local * seen)


def workspace_bytes(arch: Arch, context: int, parallel: int, dtype: str,
                    max_tokens: int = MAX_TOKENS) -> int:
    size = COMPUTE_BYTES[dtype]
    tokens = min(max_tokens, context)
    activations = tokens * (4 * arch.hidden + 3 * arch.ffn
                            + (arch.heads + 2 * arch.kv_heads) * arch.head_dim) * size
    scores = arch.heads * tokens * context * 4 + tokens * context  # float32 + the mask
    gathered = 2 * context * arch.kv_heads * arch.head_dim * size * max(1, parallel)
    logits = parallel * arch.vocab * 4
    return activations + scores + gathered + logits


def estimate_cuda(spec_id: str, arch: Arch, params: int, variant: Variant,
                  hw: HardwareProfile, context: int, parallel: int = 1,
                  weight_dtype: str | None = None, max_tokens: int = MAX_TOKENS) -> Fit:
    """The cuda engine's Fit (same shape as app.fit.estimate's, so recommendations, `ember
    hw` and the GUI show it alike). The engine has no partial offload: a model that does
    not fit the GPU does not fit."""
    gpu = on_gpu(hw)
    dtype = compute_dtype(hw)
    weights = weight_bytes(arch, params, weight_dtype or dtype, dtype)
    kv = kv_cache_bytes(arch, context, parallel, dtype, max_tokens)
    work = workspace_bytes(arch, context, parallel, dtype, max_tokens)
    overhead = TORCH_PROCESS_BYTES
    if gpu:
        graphs = workspace_bytes(arch, 1, GRAPH_BATCH, dtype, 1)
        overhead += graphs + int(ALLOCATOR_SLACK * (weights + kv + work))
    mem = Memory(weights=weights, repacked=0, kv_cache=kv, buffers=work, overhead=overhead)
    gpu_budget, ram_budget, kind = budgets(hw)
    budget = gpu_budget if gpu else ram_budget
    headroom = budget - mem.total
    placement = ("full_gpu" if gpu else "cpu") if headroom >= 0 else "wont_fit"

    where = "nvidia" if gpu else "cpu"
    bandwidth = (gpu_bandwidth(hw, "nvidia") if gpu else hw.cpu_bandwidth_gbps) * GB
    per_token = weights + kv_read_bytes(arch, min(context, TYPICAL_FILL), dtype)
    decode = EFFICIENCY_CUDA[where] * bandwidth / per_token
    flops = (gpu_bandwidth(hw, "nvidia") * GPU_FLOPS_PER_GBPS if gpu
             else hw.physical_cores * CPU_FLOPS_PER_CORE)
    prefill = flops / (2 * max(params, 1))
    if placement == "wont_fit":
        decode = prefill = 0.0
    layers = arch.layers
    return Fit(spec_id, variant.format, variant.quant, context, parallel, mem, placement,
               layers if gpu and placement != "wont_fit" else 0, layers, headroom, budget,
               round(decode, 1), round(prefill, 1))


def plan_cuda_load(name: str, arch: Arch, params: int, variant: Variant, hw: HardwareProfile,
                   trained_context: int, context: int | None = None, parallel: int = 1,
                   weight_dtype: str | None = None) -> LoadPlan:
    """The cuda engine's load plan (app.fit.base.size_load's rule) on its own memory."""
    where = "GPU, bfloat16" if on_gpu(hw) else "CPU, float32"
    sized = size_load(
        lambda c, p, _kv: estimate_cuda(name, arch, params, variant, hw, c, p, weight_dtype),
        hw, trained_context, context, parallel,
        lambda fit, ctx, threads: f"Ember's engine on the {where}: {fit.memory.describe(ctx)}",
        backend="cuda")
    reason = sized.reason + ("; will not fit" if sized.fit.placement == "wont_fit" else "")
    return LoadPlan(context=sized.context, threads=sized.threads,
                    gpu_layers=-1 if on_gpu(hw) else 0, batch=MAX_TOKENS,
                    parallel=sized.parallel, reason=reason,
                    memory_bytes=sized.fit.memory.total,
                    gpu_memory_bytes=sized.fit.memory.total if on_gpu(hw) else 0)


def plan_cuda_gguf(info: GGUFInfo, hw: HardwareProfile, context: int | None = None,
                   parallel: int = 1, quant: str | None = None) -> LoadPlan:
    """plan_cuda_load for a GGUF file at hand (the Runtime's plan when cuda runs it);
    `quant` ("int8", "int4") packs the linear layers' weights at load."""
    variant = Variant("gguf", info.file_type, info.path.name, info.file_size, None, ())
    plan = plan_cuda_load(info.name, arch_from_gguf(info), info.params, variant, hw,
                          info.context_length, context, parallel, weight_dtype=quant)
    if quant is None:
        return plan
    return replace(plan, quant=quant, reason=f"{plan.reason}; weights packed as {quant} at load")
