"""The fit model of the mlx backend: an installed MLX directory's architecture and
quantization from its config.json, and its load plan (the llama.cpp formula on MLX's
weights; K and V in float32 on the CPU, and the weights too where OpenBLAS is there)."""

from __future__ import annotations

from dataclasses import replace

from app.fit.base import SizedLoad, size_load
from app.fit.estimate import BITS_PER_WEIGHT, SLIDING_PATTERN, estimate
from app.fit.offload import UBATCH
from app.hardware import HardwareProfile
from app.registry import Arch, Variant
from backends.base import LoadPlan, ModelFiles
from backends.mlx_blas import openblas_library
from backends.mlx_dir import weights_bytes

MLX_CPU_PREFILL_STEP = 16  # prompt tokens per step of the mlx backend on the CPU


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


def plan_mlx_load(config: dict, model: ModelFiles, hw: HardwareProfile,
                  context: int | None = None, parallel: int = 1) -> LoadPlan:
    """The mlx backend's load plan for an installed MLX directory (app.fit.base.size_load's
    rule). On the CPU with OpenBLAS, a quantized model's weights are unpacked to float32 at
    load where that fits (backends.mlx_blas: about 20x faster there), else kept packed."""
    arch = arch_from_mlx_config(config)
    if not hw.apple_chip:  # the CPU backend keeps K and V in float32 (backends/mlx/backend.py)
        arch = replace(arch, head_dim=arch.head_dim * 2)
    trained = int(config.get("max_position_embeddings") or model.context_length or 4096)
    weights = weights_bytes(model.path)
    quant = mlx_quant(config)
    params = int(weights * 8 / BITS_PER_WEIGHT.get(quant, 16.0))
    where = "Metal, unified memory" if hw.apple_chip else "CPU (mlx[cpu])"

    def sized_with(variant: Variant, note: str) -> SizedLoad:
        return size_load(
            lambda c, p, _kv: estimate(model.id, arch, params, variant, hw, c, p, repacked=0),
            hw, trained, context, parallel,
            lambda fit, ctx, threads: f"MLX on {where}{note}: {fit.memory.describe(ctx)}",
            backend="mlx")

    packed = Variant("mlx", quant, model.path.name, weights, None, ())
    sized, unpack = sized_with(packed, ""), False
    if not hw.apple_chip and quant.endswith("bit") and openblas_library() is not None:
        unpacked = sized_with(replace(packed, quant="F32", size_bytes=params * 4),
                              ", weights unpacked to float32 for OpenBLAS")
        if unpacked.fit.placement != "wont_fit" and unpacked.context >= sized.context:
            sized, unpack = unpacked, True
    # The prefill step: mlx[cpu]'s quantized matmul prefilled about one prompt token a second
    # on the 2-core VMs (docs/notes/mlx-on-cpu.md), so short steps keep a cancel (checked
    # between steps) from waiting minutes.
    batch = UBATCH if hw.apple_chip else MLX_CPU_PREFILL_STEP
    return LoadPlan(context=sized.context, threads=sized.threads,
                    gpu_layers=-1 if hw.apple_chip else 0, batch=batch,
                    parallel=sized.parallel, reason=sized.reason,
                    memory_bytes=sized.fit.memory.total,
                    gpu_memory_bytes=sized.fit.memory.total if hw.apple_chip else 0,
                    unpack_weights=unpack)
