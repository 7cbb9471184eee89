"""The load plan for an installed model in a given backend: reads the model's files (a clear
error before a native library touches them) and asks that backend's fit, each of which
follows the one rule in app.fit.base.size_load."""

from __future__ import annotations

from dataclasses import replace

from app.fit.cuda import plan_cuda_gguf
from app.fit.estimate import gpu_bytes_with, plan_load
from app.fit.mlx import plan_mlx_load
from app.gguf_file import read_model_gguf
from app.hardware import HardwareProfile
from backends.base import LoadPlan, ModelFiles
from backends.mlx_dir import read_config


def plan_for(model: ModelFiles, backend: str, hw: HardwareProfile, context: int | None = None,
             parallel: int = 1, quant: str | None = None,
             kv_cache: str | None = None) -> LoadPlan:
    """`quant` ("int8", "int4") packs the cuda backend's weights at load; `kv_cache` ("f16",
    "q8_0") is llama.cpp's KV cache type (the other engines keep their own)."""
    if model.format == "mlx":
        return plan_mlx_load(read_config(model.path), model, hw, context, parallel)
    info = read_model_gguf(model.path)
    if backend == "cuda":
        return plan_cuda_gguf(info, hw, context, parallel, quant)
    # the model's vision projector (ModelFiles.projector; older stand-ins have none)
    return plan_load(info, hw, context, parallel, kv_cache, getattr(model, "projector", None))


def with_gpu_layers(model: ModelFiles, backend: str, hw: HardwareProfile, plan: LoadPlan,
                    gpu_layers: int) -> LoadPlan:
    """`plan` with llama.cpp's n_gpu_layers `gpu_layers` and the GPU memory that takes
    (the other engines put all or nothing on the GPU: their plan's GPU memory stays)."""
    if backend != "llamacpp" or model.format != "gguf":
        return replace(plan, gpu_layers=gpu_layers)
    return replace(plan, gpu_layers=gpu_layers, gpu_memory_bytes=gpu_bytes_with(
        read_model_gguf(model.path), hw, plan, gpu_layers, getattr(model, "projector", None)))
