"""The fit model of engines that run a model file's own quantization: llama.cpp (GGUF) and
MLX. Memory = weights as stored + KV cache + compute buffers + the worker process (plus
llama.cpp's reclaimable CPU repack copy in the resident peak), placed on the GPU, split, on
the CPU, or "will not fit"; decode speed from memory bandwidth, prefill from FLOP/s.
Where each constant comes from: docs/notes/fit-model.md.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.fit.base import (
    APPLE_FLOPS_PER_GBPS,
    CPU_FLOPS_PER_CORE,
    GB,
    GPU_FLOPS_PER_GBPS,
    MIN_CONTEXT,
    Fit,
    Memory,
    budgets,
    gpu_bandwidth,
    is_discrete,
    offload_gpus,
    size_load,
)
from app.fit.offload import (
    KV_BYTES,
    OVERHEAD_BYTES,
    buffer_bytes,
    gpu_buffer_bytes,
    layer_cells,
    layers_kv_bytes,
    logits_buffer_bytes,
    offload_plan,
    output_fits,
    partial_memory,
    parts,
    ram_bytes,
    read_split,
    state_split,
)
from app.fit.projector import ProjectorCost, file_cost
from app.gguf_file import GGUFInfo
from app.hardware import HardwareProfile
from app.registry import Arch, Variant
from backends.base import LoadPlan

REPACKED_TYPES = ("Q4_0", "Q4_K", "IQ4_NL")
# Share of a file's bytes in repackable tensors, by quant mix, for files not yet downloaded
# (Qwen2.5-Coder-1.5B Q4_K_M: 596.5 of 1059.9 MiB; docs/notes/fit-model.md).
REPACK_SHARE = {"Q4_K_M": 0.56, "Q4_K_S": 0.9, "Q4_0": 0.95, "IQ4_NL": 0.95}
# Bits per weight, as stored (block scales included). GGUF mixes: from real files (which
# ones is not recorded: docs/notes/fit-model.md).
BITS_PER_WEIGHT = {
    "F32": 32.0, "F16": 16.0, "BF16": 16.0, "Q8_0": 8.5, "Q6_K": 6.5625, "Q5_K_M": 5.69,
    "Q5_K_S": 5.54, "Q5_0": 5.5, "Q4_K_M": 4.85, "Q4_K_S": 4.58, "Q4_0": 4.5, "IQ4_XS": 4.25,
    "MXFP4": 4.25, "Q3_K_M": 3.91, "Q2_K": 3.35,
    "8bit": 8.5, "6bit": 6.5, "4bit": 4.5, "bf16": 16.0, "fp16": 16.0, "int8": 8.5, "int4": 4.25,
}
# output.weight's bits per weight by file type: llama.cpp's quantize gives it Q6_K (6.5625)
# in every mix but Q8_0 and the float types (src/llama-quant.cpp, OUTPUT category); a tied
# embedding gets the same. Other formats: the file's average.
Q6_K_BITS = 6.5625
OUTPUT_BITS = {"Q8_0": 8.5, "F16": 16.0, "BF16": 16.0, "F32": 32.0}


def output_bits(variant: Variant) -> float | None:
    if variant.format != "gguf":
        return None
    return OUTPUT_BITS.get(variant.quant.upper(), Q6_K_BITS)


# Share of the bandwidth limit reached in decode over the bytes a token reads (the untied
# token embedding's one row not counted). CPU: the median of the three test models in
# benchmarks/fit_accuracy.py's recorded run, 0.44-0.56; GPU ("gpu": other vendors) and Apple:
# from the literature, not measured (docs/notes/fit-model.md). lavapipe (Mesa's Vulkan on the
# CPU, the tests' stand-in GPU) runs its shaders through LLVM and is bound by them, not by
# memory: 1.40 decode tokens/s for the 0.5B with every layer there against a 24 GB/s copy
# (docs/notes/llama-vulkan.md, "Ember against llama-bench").
EFFICIENCY = {"cpu": 0.50, "nvidia": 0.75, "apple": 0.65, "gpu": 0.75, "lavapipe": 0.02}
# prefill FLOP/s per GB/s of the GPU's bandwidth, where it is not GPU_FLOPS_PER_GBPS:
# lavapipe's from the same run, 4.36 prompt tokens/s of about 1 GFLOP each on 24 GB/s
FLOPS_PER_GBPS = {"apple": APPLE_FLOPS_PER_GBPS, "lavapipe": 0.18e9}


def bits_per_weight(variant: Variant, params: int) -> float:
    if variant.size_bytes and params:
        return variant.size_bytes * 8 / params
    return BITS_PER_WEIGHT.get(variant.quant, BITS_PER_WEIGHT.get(variant.quant.upper(), 16.0))


def weight_bytes(variant: Variant, params: int) -> int:
    if variant.size_bytes:
        return variant.size_bytes
    return int(params * BITS_PER_WEIGHT.get(variant.quant, 16.0) / 8)


def kv_cache_bytes(arch: Arch, context: int, parallel: int = 1, kv: str = "f16") -> int:
    """All layers' KV cache (app.fit.offload.layer_cells), and a hybrid model's recurrent
    states (app.fit.offload.state_split)."""
    return (layers_kv_bytes(arch, layer_cells(arch, context), 0, parallel, kv)
            + sum(state_split(arch, arch.layers, parallel)))


def repacked_bytes(variant: Variant, weights: int, hw: HardwareProfile) -> int:
    """Bytes of the CPU's second copy of repackable tensors, estimated from the quant mix."""
    if variant.format != "gguf" or not any(f in hw.isa for f in ("avx2", "neon", "asimd")):
        return 0
    return int(weights * REPACK_SHARE.get(variant.quant.upper(), 0.0))


def active_share(arch: Arch, params: int) -> float:
    """Share of the weights read per token (1 for dense models; MoE reads k of n routed
    experts in each of its MoE layers, the leading dense layers and shared experts whole)."""
    if not arch.experts or not arch.experts_per_token or not params:
        return 1.0
    moe_layers = max(0, arch.layers - arch.dense_layers)
    routed = moe_layers * arch.experts * 3 * arch.hidden * (arch.expert_ffn or arch.ffn)
    unused = routed * (1 - arch.experts_per_token / arch.experts)
    return max(0.05, 1 - unused / params)


def memory(arch: Arch, weights: int, context: int, parallel: int = 1, on_gpu: bool = False,
           repacked: int = 0, kv: str = "f16") -> Memory:
    return Memory(weights=weights, repacked=0 if on_gpu else repacked,
                  kv_cache=kv_cache_bytes(arch, context, parallel, kv),
                  buffers=buffer_bytes(arch, context, on_gpu), overhead=OVERHEAD_BYTES)


def estimate(spec_id: str, arch: Arch, params: int, variant: Variant, hw: HardwareProfile,
             context: int, parallel: int = 1, repacked: int | None = None,
             kv: str = "f16", embedding: int | None = None, output: int | None = None,
             gpu_layers: int | None = None, projector: ProjectorCost | None = None) -> Fit:
    """`repacked`: the exact bytes of repackable tensors when the file is at hand; `kv`: the
    KV cache's type (KV_BYTES); `embedding`, `output`: the file's token_embd and output.weight
    bytes (0: tied), else estimated (app.fit.offload.parts); `gpu_layers`: on a discrete GPU,
    the repeating layers to offload (a user's choice: "will not fit" where they do not),
    else the plan picks them; `projector`: a vision projector loaded beside the model
    (app.fit.projector), on the GPU where the model's layers are, else in RAM."""
    weights = weight_bytes(variant, params)
    if repacked is None:
        repacked = repacked_bytes(variant, weights, hw)
    proj = projector.total if projector is not None else 0
    on_gpu_mem = replace(memory(arch, weights, context, parallel, on_gpu=True, kv=kv),
                         projector=proj)
    cpu_mem = replace(memory(arch, weights, context, parallel, on_gpu=False, repacked=repacked,
                             kv=kv), projector=proj)
    gpu_budget, ram_budget, kind = budgets(hw)
    layers = arch.layers
    split = parts(arch, params, weights, embedding, output, output_bits(variant))

    gpu_bytes = 0
    devices = offload_gpus(hw)
    limits = [g.max_tensor_bytes for g in devices if g.max_tensor_bytes]
    out_gpu = output_fits(split, arch, min(limits) if limits else None)
    if is_discrete(kind):  # the compute buffer measured on a Vulkan device
        on_gpu_mem = replace(on_gpu_mem, buffers=gpu_buffer_bytes(arch, context, out_gpu)
                             + (0 if out_gpu else logits_buffer_bytes(arch)))
        # each further GPU of a layer split holds a compute buffer of its own
        more = (len(devices) - 1) * gpu_buffer_bytes(arch, context, output_on_gpu=False)
        # the projector goes to the GPU with the first offloaded layer (mtmd's use_gpu)
        placement, gpu_layers, gpu_bytes = offload_plan(arch, split, context, parallel, kv,
                                                        gpu_budget - more - proj, ram_budget,
                                                        cpu_mem, gpu_layers, out_gpu)
        gpu_bytes += more + proj if gpu_bytes else 0
    elif kind and on_gpu_mem.total <= gpu_budget:  # unified memory: all or nothing
        placement, gpu_layers, gpu_bytes = "full_gpu", layers, on_gpu_mem.total
    else:
        placement, gpu_layers = ("cpu" if cpu_mem.total <= ram_budget else "wont_fit"), 0
    n_gpu = layers if placement == "full_gpu" else gpu_layers
    if placement == "full_gpu":
        mem, budget = on_gpu_mem, gpu_budget
        headroom = gpu_budget - (gpu_bytes if is_discrete(kind) else on_gpu_mem.total)
    elif placement == "partial":
        mem = replace(partial_memory(arch, context, parallel, kv, gpu_layers, cpu_mem,
                                     repacked, out_gpu), projector=proj)
        budget = ram_budget
        headroom = ram_budget - ram_bytes(arch, split, context, parallel, kv, gpu_layers,
                                          out_gpu)
    elif gpu_bytes > gpu_budget:  # layers asked for that the GPU cannot hold
        mem, budget, headroom = on_gpu_mem, gpu_budget, gpu_budget - gpu_bytes
    else:
        mem, budget, headroom = cpu_mem, ram_budget, ram_budget - cpu_mem.total

    unused = weights * (1 - active_share(arch, params))
    gpu_read, cpu_read = read_split(arch, split, context, kv, n_gpu, unused,
                                    out_gpu or not is_discrete(kind))
    cpu_bw = hw.cpu_bandwidth_gbps * GB * EFFICIENCY["cpu"]
    gpu_gbps = gpu_bandwidth(hw, kind)
    gpu_bw = gpu_gbps * GB * EFFICIENCY.get(kind or "cpu", EFFICIENCY["gpu"])
    seconds = gpu_read / gpu_bw + cpu_read / cpu_bw
    flops_per_token = 2 * params * active_share(arch, params)
    per_gbps = FLOPS_PER_GBPS.get(kind or "", GPU_FLOPS_PER_GBPS)
    gpu_share = gpu_read / (gpu_read + cpu_read) if gpu_read + cpu_read else 0.0
    prefill_s = (flops_per_token * gpu_share / (gpu_gbps * per_gbps)
                 + flops_per_token * (1 - gpu_share) / (hw.physical_cores * CPU_FLOPS_PER_CORE))
    decode = 0.0 if placement == "wont_fit" else round(1 / seconds, 1)
    prefill = 0.0 if placement == "wont_fit" else round(1 / prefill_s, 1)
    return Fit(spec_id, variant.format, variant.quant, context, parallel, mem, placement,
               gpu_layers, layers, headroom, budget, decode, prefill, kv, gpu_bytes)


def arch_from_gguf(info: GGUFInfo) -> Arch:
    heads = info.arch_int("attention.head_count", 1)
    hidden = info.arch_int("embedding_length", 0)
    window = info.arch_int("attention.sliding_window", 0)
    tokens = info.metadata.get("tokenizer.ggml.tokens")  # the array's length (not read)
    # block_count includes a NextN/MTP block where the file keeps one (GLM-4.7-Flash), which
    # llama.cpp's main context neither runs nor caches (src/llama-model.cpp: n_layer())
    layers = info.arch_int("block_count", 1) - info.arch_int("nextn_predict_layers", 0)
    head_dim = info.arch_int("attention.key_length", hidden // max(heads, 1))
    v_head_dim = info.arch_int("attention.value_length", head_dim)
    arch = Arch(
        type=info.architecture, layers=layers, hidden=hidden,
        heads=heads, kv_heads=info.arch_int("attention.head_count_kv", heads),
        head_dim=head_dim,
        v_head_dim=v_head_dim if v_head_dim != head_dim else None,
        vocab=tokens if isinstance(tokens, int) and tokens else 32000,
        ffn=info.arch_int("feed_forward_length", 0),
        sliding_window=window or None,
        sliding_pattern=SLIDING_PATTERN.get(info.architecture) if window else None,
        tied_embeddings=info.output[1] == 0)  # no output.weight: llama.cpp uses token_embd
    arch = with_mla(with_moe(arch, info), info)
    interval = info.arch_int("full_attention_interval", 0)
    if not interval:
        return arch
    # qwen35's Gated DeltaNet layers, from llama.cpp's ssm.* keys for them (inner_size: the
    # value heads x their width, state_size: the width, group_count: the key heads)
    d = info.arch_int("ssm.state_size", 0)
    return replace(arch, full_attention_interval=interval, linear_head_dim=d,
                   linear_key_heads=info.arch_int("ssm.group_count", 0),
                   linear_value_heads=info.arch_int("ssm.inner_size", 0) // max(d, 1),
                   linear_conv_kernel=info.arch_int("ssm.conv_kernel", 0))


def with_moe(arch: Arch, info: GGUFInfo) -> Arch:
    """`arch` with a MoE's fields from llama.cpp's keys (src/llama-arch.cpp): expert_count,
    expert_used_count, and deepseek2's expert_shared_count, expert_feed_forward_length and
    leading_dense_block_count."""
    experts = info.arch_int("expert_count", 0)
    if not experts:
        return arch
    return replace(arch, experts=experts,
                   experts_per_token=info.arch_int("expert_used_count", 0) or None,
                   expert_ffn=info.arch_int("expert_feed_forward_length", 0) or None,
                   shared_experts=info.arch_int("expert_shared_count", 0),
                   dense_layers=info.arch_int("leading_dense_block_count", 0))


def with_mla(arch: Arch, info: GGUFInfo) -> Arch:
    """`arch` with MLA's fields, in the registry's config.json view, from a deepseek2 GGUF:
    its attention keys describe the cache llama.cpp keeps (head_count_kv 1, key_length
    kv_lora_rank + rope dimension, value_length kv_lora_rank: conversion/deepseek.py), and
    key_length_mla / value_length_mla the decompressed heads. A file without the _mla keys
    is an older conversion llama.cpp runs as plain attention (is_mla() false): sized as
    such, from head_count_kv and key_length."""
    rank = info.arch_int("attention.kv_lora_rank", 0)
    k_mla = info.arch_int("attention.key_length_mla", 0)
    if not (rank and k_mla):
        return arch
    v_mla = info.arch_int("attention.value_length_mla", k_mla)
    return replace(arch, kv_lora_rank=rank, rope_head_dim=info.arch_int("rope.dimension_count", 0),
                   q_lora_rank=info.arch_int("attention.q_lora_rank", 0) or None,
                   kv_heads=arch.heads, head_dim=k_mla, v_head_dim=v_mla)


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


def file_estimate(info: GGUFInfo, hw: HardwareProfile, context: int, parallel: int = 1,
                  kv: str = "f16", gpu_layers: int | None = None,
                  projector: ProjectorCost | None = None) -> Fit:
    """estimate() for a GGUF file at hand: its own tensor sizes and repack share."""
    variant = Variant("gguf", info.file_type, info.path.name, info.file_size, None, ())
    return estimate(info.name, arch_from_gguf(info), info.params, variant, hw, context,
                    parallel, file_repacked_bytes(info, hw), kv, info.embedding[1] or None,
                    info.output[1], gpu_layers, projector)


def layer_choices(info: GGUFInfo, hw: HardwareProfile, context: int, parallel: int = 1,
                  kv: str = "f16", projector: ProjectorCost | None = None) -> list[Fit]:
    """The plan for each number of layers a user may offload, 0 to all (the window's GPU
    layers setting: memory and predicted speed per choice; "will not fit" where the GPU
    cannot hold them). Each fitting choice's n_gpu_layers is the value llama.cpp takes."""
    layers = arch_from_gguf(info).layers
    return [file_estimate(info, hw, context, parallel, kv, n, projector)
            for n in range(layers + 1)]


def plan_load(info: GGUFInfo, hw: HardwareProfile, context: int | None = None,
              parallel: int = 1, kv_cache: str | None = None,
              projector: Path | None = None) -> LoadPlan:
    """The llama.cpp load plan for a GGUF file (app.fit.base.size_load's rule); `kv_cache`
    ("f16", "q8_0") is the KV cache type asked for, None: the rule's choice; `projector`: the
    model's mmproj file, whose weights, encoder buffer and one image's tokens count (the
    context never shrinks below one image and MIN_CONTEXT beside it)."""
    proj = file_cost(projector) if projector is not None else None

    def headline(fit: Fit, ctx: int, threads: int) -> str:
        text = f"{fit.label}: {fit.memory.describe(ctx)}; {threads} threads"
        if proj is not None:
            text += f"; {proj.describe()}"
        return text

    sized = size_load(
        lambda c, p, kv: file_estimate(info, hw, c, p, kv, projector=proj),
        hw, info.context_length, context, parallel, headline,
        kv_types=tuple(KV_BYTES), kv_cache=kv_cache,
        min_context=MIN_CONTEXT + (proj.image_tokens if proj is not None else 0))
    fit = sized.fit
    return LoadPlan(context=sized.context, threads=sized.threads, gpu_layers=fit.n_gpu_layers,
                    parallel=sized.parallel, reason=sized.reason,
                    memory_bytes=fit.memory.total, kv_cache=fit.kv_cache,
                    gpu_memory_bytes=fit.gpu_bytes)


def gpu_bytes_with(info: GGUFInfo, hw: HardwareProfile, plan: LoadPlan,
                   n_gpu_layers: int, projector: Path | None = None) -> int:
    """GPU memory of `plan` run with llama.cpp's `n_gpu_layers` (-1: all; n >= 1: the
    output layer and n - 1 repeating layers) in place of its own: a user's setting, or fewer
    layers where the GPU could not hold the plan."""
    if n_gpu_layers == 0:
        return 0
    return file_estimate(info, hw, plan.context, plan.parallel, plan.kv_cache,
                         repeating_layers(n_gpu_layers, arch_from_gguf(info).layers),
                         file_cost(projector) if projector is not None else None).gpu_bytes


def repeating_layers(n_gpu_layers: int, layers: int) -> int:
    """The repeating layers on the GPU for llama.cpp's `n_gpu_layers` (-1: all; n >= 1: the
    output layer and n - 1 repeating layers; 0: none)."""
    return layers if n_gpu_layers < 0 else max(0, min(n_gpu_layers - 1, layers))
