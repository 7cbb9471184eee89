"""The fit model: memory and speed predictions, recommendations, and load plans.

One formula, used before download (which quantization to recommend) and at load time (the
plan the backend gets): memory = weights + KV cache + compute buffers + the worker process
(plus llama.cpp's reclaimable CPU repack copy in the resident peak), placed on the GPU, split,
on the CPU, or "will not fit"; decode speed from memory bandwidth, prefill from FLOP/s. MLX
models use the same parts. The formula term by term, where each constant comes from, and how
the predictions compare with measured peaks and speeds: docs/notes/fit-model.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from app.config import env_int
from app.gguf_file import GGUFInfo
from app.hardware import HardwareProfile
from app.registry import Arch, ModelSpec, Variant
from app.runtime.backend_choice import preferred_format
from backends.base import LoadPlan

GB = 1e9
UBATCH = 512
KV_BYTES = 2  # f16
OVERHEAD_BYTES = 112 << 20  # worker process baseline (docs/notes/fit-model.md)
BUFFER_FIXED_BYTES = 4 << 20
BUFFER_PER_CONTEXT_BYTES = 256
REPACKED_TYPES = ("Q4_0", "Q4_K", "IQ4_NL")
# Share of a file's bytes in repackable tensors, by quant mix, for files not yet downloaded
# (Qwen2.5-Coder-1.5B Q4_K_M: 596.5 of 1059.9 MiB; docs/notes/fit-model.md).
REPACK_SHARE = {"Q4_K_M": 0.56, "Q4_K_S": 0.9, "Q4_0": 0.95, "IQ4_NL": 0.95}
RAM_SHARE = 0.9  # of available RAM
GPU_SHARE = 0.95  # of free VRAM
CUDA_CONTEXT_BYTES = 400 << 20
HEADROOM = 0.10  # a recommendation leaves this share of the budget free
SPEED_SHARE = 0.75  # ... and is not much slower than the fastest variant that fits
FAST_ENOUGH = 20.0  # tokens/s: faster than people read, so quality wins
DEFAULT_CONTEXT = 4096
MIN_CONTEXT = 512
TYPICAL_FILL = 1024  # tokens in the context when decode speed is quoted
MLX_CPU_PREFILL_STEP = 16  # prompt tokens per step of the mlx backend on the CPU

# Bits per weight, as stored (block scales included). GGUF mixes: from real files (which
# ones is not recorded: docs/notes/fit-model.md).
BITS_PER_WEIGHT = {
    "F32": 32.0, "F16": 16.0, "BF16": 16.0, "Q8_0": 8.5, "Q6_K": 6.5625, "Q5_K_M": 5.69,
    "Q5_K_S": 5.54, "Q5_0": 5.5, "Q4_K_M": 4.85, "Q4_K_S": 4.58, "Q4_0": 4.5, "IQ4_XS": 4.25,
    "MXFP4": 4.25, "Q3_K_M": 3.91, "Q2_K": 3.35,
    "8bit": 8.5, "6bit": 6.5, "4bit": 4.5, "bf16": 16.0, "fp16": 16.0, "int8": 8.5, "int4": 4.25,
}
# Share of the bandwidth limit reached in decode. CPU: 23.6 of 43 tokens/s on MODELS.md's
# 2-core Xeon; GPU and Apple: from the literature, not measured (docs/notes/fit-model.md).
EFFICIENCY = {"cpu": 0.55, "nvidia": 0.75, "apple": 0.65}
CPU_FLOPS_PER_CORE = 48e9  # prefill: 96 tokens/s x 1 GFLOP/token, 2 cores (docs/notes/fit-model.md)
GPU_FLOPS_PER_GBPS = 60e9  # effective prefill FLOP/s per GB/s of bandwidth (tensor cores)
APPLE_FLOPS_PER_GBPS = 30e9

PLACEMENT_LABEL = {"full_gpu": "full GPU", "partial": "partial offload", "cpu": "CPU",
                   "wont_fit": "will not fit"}


@dataclass(frozen=True)
class Memory:
    weights: int
    repacked: int
    kv_cache: int
    buffers: int
    overhead: int

    @property
    def total(self) -> int:
        """What must fit."""
        return self.weights + self.kv_cache + self.buffers + self.overhead

    @property
    def resident_peak(self) -> int:
        """The worker's peak resident memory where RAM is plentiful (repacked copy included)."""
        return self.total + self.repacked

    def describe(self, context: int) -> str:
        ctx = f"{context // 1024}k" if context % 1024 == 0 else str(context)
        weights = f"{self.weights / GB:.2f} GB weights"
        if self.repacked:
            weights += f" (+{self.repacked / GB:.2f} GB reclaimable CPU repack)"
        return (f"{weights} + {self.kv_cache / GB:.2f} GB KV at {ctx} context + "
                f"{(self.buffers + self.overhead) / GB:.2f} GB buffers")


@dataclass(frozen=True)
class Fit:
    model: str
    format: str
    quant: str
    context: int
    parallel: int
    memory: Memory
    placement: str  # full_gpu | partial | cpu | wont_fit
    gpu_layers: int
    layers: int
    headroom_bytes: int
    budget_bytes: int  # of the device that binds (GPU memory for full GPU, else RAM)
    decode_tokens_per_s: float
    prefill_tokens_per_s: float

    @property
    def label(self) -> str:
        if self.placement == "partial":
            return f"partial offload ({self.gpu_layers}/{self.layers} layers on GPU)"
        return PLACEMENT_LABEL[self.placement]

    def explain(self) -> str:
        text = f"{self.label}: {self.memory.describe(self.context)}"
        if self.placement != "wont_fit":
            speed = self.decode_tokens_per_s
            text += f"; ~{speed:.0f} tokens/s" if speed >= 10 else f"; ~{speed:.1f} tokens/s"
        return text

    def to_json(self) -> dict:
        d = asdict(self)
        d["memory"]["total"] = self.memory.total
        d["memory"]["resident_peak"] = self.memory.resident_peak
        d["label"] = self.label
        d["explanation"] = self.explain()
        return d


def bits_per_weight(variant: Variant, params: int) -> float:
    if variant.size_bytes and params:
        return variant.size_bytes * 8 / params
    return BITS_PER_WEIGHT.get(variant.quant, BITS_PER_WEIGHT.get(variant.quant.upper(), 16.0))


def weight_bytes(variant: Variant, params: int) -> int:
    if variant.size_bytes:
        return variant.size_bytes
    return int(params * BITS_PER_WEIGHT.get(variant.quant, 16.0) / 8)


def kv_cache_bytes(arch: Arch, context: int, parallel: int = 1) -> int:
    per_cell_layer = 2 * arch.kv_heads * arch.head_dim * KV_BYTES
    if arch.sliding_window and arch.sliding_pattern:
        global_layers = arch.layers // arch.sliding_pattern
        local_cells = min(context, arch.sliding_window + UBATCH)
    else:
        global_layers, local_cells = arch.layers, 0
    local_layers = arch.layers - global_layers
    cells = global_layers * context + local_layers * local_cells
    return per_cell_layer * cells * parallel


def buffer_bytes(arch: Arch, context: int, on_gpu: bool) -> int:
    fixed = BUFFER_FIXED_BYTES + BUFFER_PER_CONTEXT_BYTES * context
    return UBATCH * arch.vocab * 4 + fixed if on_gpu else fixed


def repacked_bytes(variant: Variant, weights: int, hw: HardwareProfile) -> int:
    """Bytes of the CPU's second copy of repackable tensors, estimated from the quant mix."""
    if variant.format != "gguf" or not any(f in hw.isa for f in ("avx2", "neon", "asimd")):
        return 0
    return int(weights * REPACK_SHARE.get(variant.quant.upper(), 0.0))


def active_share(arch: Arch, params: int) -> float:
    """Share of the weights read per token (1 for dense models; MoE reads k of n experts)."""
    if not arch.experts or not arch.experts_per_token or not params:
        return 1.0
    expert_params = arch.layers * arch.experts * 3 * arch.hidden * arch.ffn
    unused = expert_params * (1 - arch.experts_per_token / arch.experts)
    return max(0.05, 1 - unused / params)


def memory(arch: Arch, weights: int, context: int, parallel: int = 1, on_gpu: bool = False,
           repacked: int = 0) -> Memory:
    return Memory(weights=weights, repacked=0 if on_gpu else repacked,
                  kv_cache=kv_cache_bytes(arch, context, parallel),
                  buffers=buffer_bytes(arch, context, on_gpu), overhead=OVERHEAD_BYTES)


def _budgets(hw: HardwareProfile) -> tuple[int, int, str | None]:
    """(GPU bytes, RAM bytes, GPU kind) that a model may use."""
    ram = int(hw.ram_available * RAM_SHARE)
    nvidia = [g for g in hw.gpus if g.vendor == "nvidia"]
    if nvidia:
        g = max(nvidia, key=lambda g: g.vram_free)
        return max(0, int(g.vram_free * GPU_SHARE) - CUDA_CONTEXT_BYTES), ram, "nvidia"
    apple = [g for g in hw.gpus if g.vendor == "apple"]
    if apple:
        # Unified memory: the GPU's share and the CPU's come out of the same RAM.
        return min(apple[0].vram_total, ram), ram, "apple"
    return 0, ram, None


def _gpu_bandwidth(hw: HardwareProfile, kind: str | None) -> float:
    for g in hw.gpus:
        if g.vendor == kind and g.bandwidth_gbps:
            return g.bandwidth_gbps
    return hw.cpu_bandwidth_gbps


def estimate(spec_id: str, arch: Arch, params: int, variant: Variant, hw: HardwareProfile,
             context: int, parallel: int = 1, repacked: int | None = None) -> Fit:
    """`repacked`: the exact bytes of repackable tensors when the file is at hand."""
    weights = weight_bytes(variant, params)
    if repacked is None:
        repacked = repacked_bytes(variant, weights, hw)
    on_gpu_mem = memory(arch, weights, context, parallel, on_gpu=True)
    cpu_mem = memory(arch, weights, context, parallel, on_gpu=False, repacked=repacked)
    gpu_budget, ram_budget, kind = _budgets(hw)
    layers = arch.layers
    # Weights outside the repeated layers (embeddings, output) stay with the first device.
    per_layer = (weights * 0.9 + on_gpu_mem.kv_cache) / layers

    budget, mem = ram_budget, cpu_mem
    if kind and on_gpu_mem.total <= gpu_budget:
        placement, gpu_layers, mem = "full_gpu", layers, on_gpu_mem
        budget, headroom = gpu_budget, gpu_budget - on_gpu_mem.total
    else:
        gpu_layers = 0
        if kind == "nvidia":
            room = gpu_budget - on_gpu_mem.buffers
            gpu_layers = max(0, min(layers - 1, int(room // per_layer)))
        in_ram = cpu_mem.total - int(gpu_layers * per_layer)
        if gpu_layers > 0 and in_ram <= ram_budget:
            placement, headroom = "partial", ram_budget - in_ram
        elif cpu_mem.total <= ram_budget:
            placement, gpu_layers, headroom = "cpu", 0, ram_budget - cpu_mem.total
        else:
            placement, gpu_layers, headroom = "wont_fit", 0, ram_budget - cpu_mem.total

    share = active_share(arch, params)
    per_token = weights * share + kv_cache_bytes(arch, min(context, TYPICAL_FILL))
    cpu_bw = hw.cpu_bandwidth_gbps * GB * EFFICIENCY["cpu"]
    gpu_bw = _gpu_bandwidth(hw, kind) * GB * EFFICIENCY.get(kind or "cpu", 0.55)
    if placement == "full_gpu":
        seconds = per_token / gpu_bw
    elif placement == "partial":
        on_gpu_share = gpu_layers / layers
        seconds = per_token * on_gpu_share / gpu_bw + per_token * (1 - on_gpu_share) / cpu_bw
    else:
        seconds = per_token / cpu_bw
    flops_per_token = 2 * params * share
    if placement == "full_gpu":
        per_gbps = APPLE_FLOPS_PER_GBPS if kind == "apple" else GPU_FLOPS_PER_GBPS
        flops = _gpu_bandwidth(hw, kind) * per_gbps
    else:
        flops = hw.physical_cores * CPU_FLOPS_PER_CORE
    decode = 0.0 if placement == "wont_fit" else round(1 / seconds, 1)
    prefill = 0.0 if placement == "wont_fit" else round(flops / flops_per_token, 1)
    return Fit(spec_id, variant.format, variant.quant, context, parallel, mem, placement,
               gpu_layers, layers, headroom, budget, decode, prefill)


def backend_formats(hw: HardwareProfile) -> tuple[str, ...]:
    """Formats whose variants Ember offers here: GGUF (llama.cpp) everywhere, and MLX on
    Apple Silicon (mlx[cpu] also runs on Linux, but far slower than llama.cpp there)."""
    return ("gguf", "mlx") if hw.apple_chip else ("gguf",)


def fits_for(spec: ModelSpec, hw: HardwareProfile, context: int | None = None,
             parallel: int = 1) -> list[Fit]:
    ctx = min(context or min(spec.context_default, DEFAULT_CONTEXT), spec.context_max)
    formats = backend_formats(hw)
    if hw.has_nvidia and hw.torch_cuda is not None:
        # the cuda backend runs models here (app.runtime.backend_choice): size them as its engine
        # keeps them
        from app.fit_cuda import estimate_cuda
        return [estimate_cuda(spec.id, spec.arch, spec.params, v, hw, ctx, parallel)
                for v in spec.variants if v.format in formats]
    return [estimate(spec.id, spec.arch, spec.params, v, hw, ctx, parallel)
            for v in spec.variants if v.format in formats]


def recommend(spec: ModelSpec, hw: HardwareProfile, context: int | None = None,
              parallel: int = 1) -> Fit | None:
    """The variant to recommend here: the highest quality (bits per weight) that fits with
    HEADROOM of its budget free and decodes at least SPEED_SHARE of the fastest fitting
    variant's speed (or FAST_ENOUGH tokens/s). If none leaves headroom, the smallest that
    fits; if none fits, the smallest (labelled "will not fit"). Only variants in the
    preferred format (app.runtime.backend_choice: MLX on Apple Silicon) compete when one of
    them runs."""
    fits = fits_for(spec, hw, context, parallel)
    if not fits:
        return None
    # the preferred format's variants (MLX on Apple Silicon) when one of them can run here
    prefer = preferred_format(hw)
    if any(f.format == prefer and f.placement != "wont_fit" for f in fits):
        fits = [f for f in fits if f.format == prefer]
    variants = {(v.format, v.quant): v for v in spec.variants}

    def quality(f: Fit) -> float:
        return bits_per_weight(variants[(f.format, f.quant)], spec.params)

    roomy = [f for f in fits if f.placement != "wont_fit"
             and f.headroom_bytes >= HEADROOM * f.budget_bytes]
    if roomy:
        fastest = max(f.decode_tokens_per_s for f in roomy)
        good = [f for f in roomy if f.decode_tokens_per_s >= SPEED_SHARE * fastest
                or f.decode_tokens_per_s >= FAST_ENOUGH]
        return max(good, key=quality)
    fitting = [f for f in fits if f.placement != "wont_fit"]
    return min(fitting or fits, key=lambda f: f.memory.total)


def arch_from_gguf(info: GGUFInfo) -> Arch:
    heads = int(info.arch_value("attention.head_count", 1))
    hidden = int(info.arch_value("embedding_length", 0))
    window = info.arch_value("attention.sliding_window")
    return Arch(
        type=info.architecture, layers=int(info.arch_value("block_count", 1)), hidden=hidden,
        heads=heads, kv_heads=int(info.arch_value("attention.head_count_kv", heads)),
        head_dim=int(info.arch_value("attention.key_length", hidden // max(heads, 1))),
        vocab=int(info.metadata.get("tokenizer.ggml.tokens", 0) or 0) or 32000,
        ffn=int(info.arch_value("feed_forward_length", 0)),
        sliding_window=int(window) if window else None,
        sliding_pattern=SLIDING_PATTERN.get(info.architecture) if window else None)


# Every Nth layer is global in these architectures (the rest use the sliding window).
SLIDING_PATTERN = {"gemma3": 6, "gemma2": 2, "gpt-oss": 2, "cohere2": 4}


def file_repacked_bytes(info: GGUFInfo, hw: HardwareProfile) -> int:
    if not any(f in hw.isa for f in ("avx2", "neon", "asimd")):
        return 0
    # The token embedding is read row by row (get_rows), never repacked: llama.cpp logs 596.5 MiB
    # repacked for Qwen2.5-Coder-1.5B, whose Q4_K tensors other than it add up to that.
    total = sum(info.type_bytes.get(t, 0) for t in REPACKED_TYPES)
    embd_type, embd_bytes = info.embedding
    return total - embd_bytes if embd_type in REPACKED_TYPES else total


def shrink_to_fit(fit_at: Callable[[int, int], Fit], ctx: int,
                  parallel: int) -> tuple[Fit, int, int]:
    """Every backend's load rule: halve the parallel sequences, then the context, until the
    fit model says the load fits (or nothing is left to cut). Returns the fit, context and
    parallel sequences."""
    fit = fit_at(ctx, parallel)
    while fit.placement == "wont_fit" and parallel > 1:
        parallel //= 2
        fit = fit_at(ctx, parallel)
    while fit.placement == "wont_fit" and ctx > MIN_CONTEXT:
        ctx //= 2
        fit = fit_at(ctx, parallel)
    return fit, ctx, parallel


def plan_load(info: GGUFInfo, hw: HardwareProfile, context: int | None = None,
              parallel: int = 1) -> LoadPlan:
    """The llama.cpp load plan: up to `parallel` sequences (halved until their KV caches
    fit), each with the largest context up to the one asked for that fits."""
    arch = arch_from_gguf(info)
    wanted = context or env_int("EMBER_CONTEXT") or DEFAULT_CONTEXT
    ctx = max(MIN_CONTEXT, min(wanted, info.context_length))
    params = info.params
    variant = Variant("gguf", info.file_type, info.path.name, info.file_size, None, ())
    repacked = file_repacked_bytes(info, hw)
    fit, ctx, parallel = shrink_to_fit(
        lambda c, p: estimate(info.name, arch, params, variant, hw, c, p, repacked),
        ctx, parallel)
    threads = env_int("EMBER_THREADS") or hw.physical_cores
    reason = f"{fit.label}: {fit.memory.describe(ctx)}; {threads} threads"
    if parallel > 1:
        reason += f"; {parallel} parallel sequences"
    if ctx < min(wanted, info.context_length):
        reason += f" (context cut from {wanted} to fit)"
    gpu_layers = {"full_gpu": -1, "partial": fit.gpu_layers}.get(fit.placement, 0)
    return LoadPlan(context=ctx, threads=threads, gpu_layers=gpu_layers, parallel=parallel,
                    reason=reason, memory_bytes=fit.memory.total)


def arch_from_mlx_config(config: dict) -> Arch:
    heads = int(config.get("num_attention_heads", 1))
    hidden = int(config.get("hidden_size", 0))
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    return Arch(
        type=str(config.get("model_type", "unknown")),
        layers=int(config.get("num_hidden_layers", 1)), hidden=hidden, heads=heads,
        kv_heads=int(config.get("num_key_value_heads", heads)),
        head_dim=int(config.get("head_dim") or hidden // max(heads, 1)),
        vocab=int(config.get("vocab_size", 32000)),
        ffn=int(config.get("intermediate_size", 0)),
        sliding_window=int(window) if window and config.get("model_type") in SLIDING_PATTERN
        else None,
        sliding_pattern=SLIDING_PATTERN.get(str(config.get("model_type"))) if window else None,
        tied_embeddings=bool(config.get("tie_word_embeddings", False)))


def mlx_quant(config: dict) -> str:
    """The registry's name for an MLX model's quantization ("4bit", "8bit", "bf16")."""
    q = config.get("quantization") or config.get("quantization_config") or {}
    if isinstance(q, dict) and q.get("bits"):
        return f"{int(q['bits'])}bit"
    return str(config.get("torch_dtype") or config.get("dtype") or "bf16")


def plan_mlx_load(config: dict, model: object, hw: HardwareProfile,
                  context: int | None = None, parallel: int = 1) -> LoadPlan:
    """The mlx backend's load plan for an installed MLX directory (`model`: an
    InstalledModel). Same shape as plan_load: parallel halved, then context, until it fits."""
    from backends.mlx_dir import weights_bytes

    arch = arch_from_mlx_config(config)
    if not hw.apple_chip:  # the CPU backend keeps K and V in float32 (backends/mlx/backend.py)
        arch = replace(arch, head_dim=arch.head_dim * 2)
    trained = int(config.get("max_position_embeddings") or model.context_length or 4096)
    wanted = context or env_int("EMBER_CONTEXT") or DEFAULT_CONTEXT
    ctx = max(MIN_CONTEXT, min(wanted, trained))
    weights = weights_bytes(model.path)
    variant = Variant("mlx", mlx_quant(config), model.path.name, weights, None, ())
    params = int(weights * 8 / BITS_PER_WEIGHT.get(variant.quant, 16.0))

    fit, ctx, parallel = shrink_to_fit(
        lambda c, p: estimate(model.id, arch, params, variant, hw, c, p, repacked=0),
        ctx, parallel)
    threads = env_int("EMBER_THREADS") or hw.physical_cores
    where = "Metal, unified memory" if hw.apple_chip else "CPU (mlx[cpu])"
    reason = f"MLX on {where}: {fit.memory.describe(ctx)}"
    if parallel > 1:
        reason += f"; {parallel} parallel sequences"
    if ctx < min(wanted, trained):
        reason += f" (context cut from {wanted} to fit)"
    # The prefill step: mlx[cpu] prefilled about one prompt token a second on the 2-core VMs
    # (docs/notes/mlx-on-cpu.md), so short steps keep a cancel (checked between steps) from
    # waiting minutes.
    batch = UBATCH if hw.apple_chip else MLX_CPU_PREFILL_STEP
    return LoadPlan(context=ctx, threads=threads, gpu_layers=-1 if hw.apple_chip else 0,
                    batch=batch, parallel=parallel, reason=reason,
                    memory_bytes=fit.memory.total)


def memory_budget(hw: HardwareProfile) -> int:
    """Bytes the loaded models may use together (GPU memory when there is a GPU)."""
    gpu, ram, kind = _budgets(hw)
    return gpu if kind == "nvidia" and gpu > 0 else ram
