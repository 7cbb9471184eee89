"""The fit model's shared parts: what a prediction is (Memory, Fit), the memory budgets of
this machine, and the one load-plan rule every backend's plan follows.

The formula term by term, and where each constant comes from: docs/notes/fit-model.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass

from app.config import ConfigError, env_int
from app.hardware import GPU, HardwareProfile

GB = 1e9
RAM_SHARE = 0.9  # of available RAM
GPU_SHARE = 0.95  # of free VRAM
# What a discrete GPU's driver context (CUDA, Vulkan) takes before any buffer: an estimate for
# CUDA, kept for every vendor (docs/notes/fit-model.md).
GPU_CONTEXT_BYTES = 400 << 20
UNIFIED = "unified"  # the kind of a GPU other than Apple's that shares the RAM (an iGPU)
DEFAULT_CONTEXT = 4096
MIN_CONTEXT = 512
KV_CACHE_TYPES = ("f16", "q8_0")  # what EMBER_KV_CACHE may force (q8_0: llama.cpp only)
TYPICAL_FILL = 1024  # tokens in the context when decode speed is quoted
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
    # a vision projector's weights and its encoder's compute buffer (app.fit.projector)
    projector: int = 0

    @property
    def total(self) -> int:
        """What must fit."""
        return self.weights + self.kv_cache + self.buffers + self.overhead + self.projector

    @property
    def resident_peak(self) -> int:
        """The worker's peak resident memory where RAM is plentiful (repacked copy included)."""
        return self.total + self.repacked

    def describe(self, context: int) -> str:
        ctx = f"{context // 1024}k" if context % 1024 == 0 else str(context)
        weights = f"{self.weights / GB:.2f} GB weights"
        if self.repacked:
            weights += f" (+{self.repacked / GB:.2f} GB reclaimable CPU repack)"
        text = (f"{weights} + {self.kv_cache / GB:.2f} GB KV at {ctx} context + "
                f"{(self.buffers + self.overhead) / GB:.2f} GB buffers")
        if self.projector:
            text += f" + {self.projector / GB:.2f} GB vision projector"
        return text


@dataclass(frozen=True)
class Fit:
    model: str
    format: str
    quant: str
    context: int
    parallel: int
    memory: Memory
    placement: str  # full_gpu | partial | cpu | wont_fit
    gpu_layers: int  # repeating layers on the GPU (the output layer goes with the first)
    layers: int  # repeating layers
    headroom_bytes: int
    budget_bytes: int  # of the device that binds (GPU memory for full GPU, else RAM)
    decode_tokens_per_s: float
    prefill_tokens_per_s: float
    kv_cache: str = "f16"  # the KV cache's type: "f16" (the backend's float) or "q8_0"
    gpu_bytes: int = 0  # what the plan puts in GPU memory (all of it on unified memory)

    @property
    def n_gpu_layers(self) -> int:
        """llama.cpp's `n_gpu_layers` for this plan: -1 (all), 0 (none), or the repeating
        layers on the GPU + 1 for the output layer, which llama.cpp offloads first
        (docs/notes/fit-model.md, "GPU offload")."""
        return {"full_gpu": -1, "partial": self.gpu_layers + 1}.get(self.placement, 0)

    @property
    def label(self) -> str:
        if self.placement == "partial":
            return f"partial offload ({self.gpu_layers}/{self.layers} layers on GPU)"
        return PLACEMENT_LABEL[self.placement]

    def explain(self) -> str:
        text = f"{self.label}: {self.memory.describe(self.context)}"
        if self.gpu_bytes and self.gpu_bytes != self.memory.total:  # a discrete GPU's share
            text += f" ({self.gpu_bytes / GB:.2f} GB of it on the GPU)"
        if self.placement != "wont_fit":
            text += "; " + speed_text(self.decode_tokens_per_s)
        return text

    def to_json(self) -> dict:
        d = asdict(self)
        d["memory"]["total"] = self.memory.total
        d["memory"]["resident_peak"] = self.memory.resident_peak
        d["label"] = self.label
        d["explanation"] = self.explain()
        return d


def speed_text(tokens_per_s: float) -> str:
    """A predicted decode speed as the window and `ember` show it."""
    return (f"~{tokens_per_s:.0f} tokens/s" if tokens_per_s >= 10
            else f"~{tokens_per_s:.1f} tokens/s")


def shares_ram(gpu: GPU) -> bool:
    """A GPU whose memory is the RAM: Apple's, or one ggml reports as integrated
    (GGML_BACKEND_DEVICE_TYPE_IGPU, app.hardware.GPU.shared_memory)."""
    return gpu.vendor == "apple" or gpu.shared_memory


def offload_gpus(hw: HardwareProfile) -> tuple[GPU, ...]:
    """The discrete GPUs llama.cpp offloads to (NVIDIA, AMD, Intel or any other Vulkan
    device), the one with the most free memory first. With several, llama.cpp splits the
    offloaded layers across them in proportion to their free memory (its default layer
    split), so their budgets add up."""
    return tuple(sorted((g for g in hw.gpus if not shares_ram(g)),
                        key=lambda g: g.vram_free, reverse=True))


def offload_gpu(hw: HardwareProfile) -> GPU | None:
    """The first of offload_gpus (its vendor, bandwidth and buffer limit stand for all)."""
    gpus = offload_gpus(hw)
    return gpus[0] if gpus else None


def gpu_budget(g: GPU) -> int:
    return max(0, int(g.vram_free * GPU_SHARE) - GPU_CONTEXT_BYTES)


def is_discrete(kind: str | None) -> bool:
    """A GPU kind of budgets() with memory of its own."""
    return kind is not None and kind not in ("apple", UNIFIED)


def budgets(hw: HardwareProfile) -> tuple[int, int, str | None]:
    """(GPU bytes, RAM bytes, GPU kind) that a model may use. The kind is a discrete GPU's
    vendor ("nvidia", "amd", "intel", or another Vulkan device's), "apple", UNIFIED, or None."""
    ram = int(hw.ram_available * RAM_SHARE)
    gpus = offload_gpus(hw)
    if gpus:
        return sum(gpu_budget(g) for g in gpus), ram, gpus[0].vendor
    apple = [g for g in hw.gpus if g.vendor == "apple"]
    if apple:
        # Unified memory: the GPU's share and the CPU's come out of the same RAM.
        return min(apple[0].vram_total, ram), ram, "apple"
    shared = [g for g in hw.gpus if shares_ram(g)]
    if shared:
        return min(shared[0].vram_total, ram), ram, UNIFIED
    return 0, ram, None


def gpu_bandwidth(hw: HardwareProfile, kind: str | None) -> float:
    """The GPU's bandwidth in GB/s; the CPU's where it is not known (and for UNIFIED)."""
    g = offload_gpu(hw)
    if g is not None and g.vendor == kind and g.bandwidth_gbps:
        return g.bandwidth_gbps
    for g in hw.gpus:
        if g.vendor == kind and g.bandwidth_gbps:
            return g.bandwidth_gbps
    return hw.cpu_bandwidth_gbps


FitAt = Callable[[int, int, str], Fit]  # (context, parallel, KV cache type) -> Fit


def context_label(context: int) -> str:
    return f"{context // 1024}k" if context % 1024 == 0 else str(context)


def shrink_to_fit(fit_at: Callable[[int, int], Fit], ctx: int, parallel: int,
                  min_context: int = MIN_CONTEXT) -> tuple[Fit, int, int]:
    """Every backend's load rule: halve the parallel sequences, then the context (not below
    `min_context`), until the fit model says the load fits (or nothing is left to cut).
    Returns the fit, context and parallel sequences."""
    fit = fit_at(ctx, parallel)
    while fit.placement == "wont_fit" and parallel > 1:
        parallel //= 2
        fit = fit_at(ctx, parallel)
    while fit.placement == "wont_fit" and ctx > min_context:
        ctx = max(ctx // 2, min_context)
        fit = fit_at(ctx, parallel)
    return fit, ctx, parallel


def kv_cache_setting() -> str | None:
    """EMBER_KV_CACHE: the KV cache type the user forces, or None (the fit model picks)."""
    raw = os.environ.get("EMBER_KV_CACHE", "").strip()
    if not raw:
        return None
    if raw.lower() not in KV_CACHE_TYPES:
        raise ConfigError(f"EMBER_KV_CACHE={raw!r} is not a KV cache type: use "
                          f"{' or '.join(KV_CACHE_TYPES)}, or leave it unset (Ember then "
                          "picks q8_0 only where f16 would not fit the context)")
    return raw.lower()


def choose_kv_cache(fit_at: FitAt, ctx: int, parallel: int, kv_types: tuple[str, ...],
                    backend: str, kv_cache: str | None = None,
                    min_context: int = MIN_CONTEXT) -> tuple[Fit, int, int, str]:
    """shrink_to_fit with the KV cache type asked for (`kv_cache`: the user's setting for
    this model in the window) or forced by EMBER_KV_CACHE, else f16 unless it would cut the
    context and q8_0 (about half the bytes) keeps more of it. Returns the fit, context,
    parallel sequences and what the plan's reason says about the KV cache ("" for f16 chosen
    on its own)."""
    if kv_cache is not None and kv_cache not in KV_CACHE_TYPES:
        raise ConfigError(f"{kv_cache!r} is not a KV cache type: use "
                          f"{' or '.join(KV_CACHE_TYPES)}")
    forced = kv_cache or kv_cache_setting()
    source = "set for this model" if kv_cache is not None else "EMBER_KV_CACHE"
    asked = f"{forced} ({source})" if kv_cache is not None else f"EMBER_KV_CACHE={forced}"
    if forced is not None and forced not in kv_types:
        fit, c, p = shrink_to_fit(lambda c, p: fit_at(c, p, kv_types[0]), ctx, parallel,
                                  min_context)
        return fit, c, p, (f"KV cache {kv_types[0]}: {asked} is the llamacpp "
                           f"backend's, the {backend} backend keeps its own")
    if forced is not None:
        fit, c, p = shrink_to_fit(lambda c, p: fit_at(c, p, forced), ctx, parallel,
                                  min_context)
        return fit, c, p, f"KV cache {forced} ({source})" if forced != "f16" else ""
    fit, c, p = shrink_to_fit(lambda c, p: fit_at(c, p, "f16"), ctx, parallel,
                              min_context)
    if "q8_0" not in kv_types or c == ctx:
        return fit, c, p, ""
    q8, qc, qp = shrink_to_fit(lambda c, p: fit_at(c, p, "q8_0"), ctx, parallel,
                               min_context)
    if q8.placement == "wont_fit" or qc <= c:
        return fit, c, p, ""
    f16_bytes = fit_at(qc, qp, "f16").memory.kv_cache
    return q8, qc, qp, (f"KV cache q8_0: {context_label(qc)} context fits in "
                        f"{q8.memory.kv_cache / GB:.2f} GB instead of {f16_bytes / GB:.2f} GB "
                        f"(f16 would fit {context_label(c)})")


@dataclass(frozen=True)
class SizedLoad:
    """What the load rule settled on: the fit at the chosen context and parallel sequences,
    the threads, and the plan's reason (the backend's own headline first)."""
    fit: Fit
    context: int
    parallel: int
    threads: int
    reason: str


def size_load(fit_at: FitAt, hw: HardwareProfile, trained_context: int,
              context: int | None, parallel: int,
              headline: Callable[[Fit, int, int], str], kv_types: tuple[str, ...] = ("f16",),
              backend: str = "llamacpp", kv_cache: str | None = None,
              min_context: int = MIN_CONTEXT) -> SizedLoad:
    """The one load-plan rule, for every backend: the context asked for (else EMBER_CONTEXT,
    else DEFAULT_CONTEXT) within the model's trained context; `parallel` sequences halved,
    then the context, until `fit_at(context, parallel, kv)` fits (shrink_to_fit), with the
    KV cache type of `kv_types` that fits the most (choose_kv_cache); EMBER_THREADS or the
    physical cores. The reason is `headline(fit, context, threads)`, then the parallel
    sequences, a cut context and a KV cache other than f16, if any. `min_context`: the least
    context the load may be cut to (a vision model's: one image and MIN_CONTEXT beside it)."""
    min_context = min(min_context, trained_context)
    wanted = min(context or env_int("EMBER_CONTEXT") or DEFAULT_CONTEXT, trained_context)
    ctx = max(min_context, wanted)
    fit, ctx, parallel, kv_note = choose_kv_cache(fit_at, ctx, parallel, kv_types, backend,
                                                  kv_cache, min_context)
    threads = env_int("EMBER_THREADS") or hw.physical_cores
    reason = headline(fit, ctx, threads)
    if parallel > 1:
        reason += f"; {parallel} parallel sequences"
    if ctx < wanted:
        reason += f" (context cut from {wanted} to fit)"
    if kv_note:
        reason += f"; {kv_note}"
    return SizedLoad(fit, ctx, parallel, threads, reason)
