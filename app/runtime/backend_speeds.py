"""Measured decode speeds of a GGUF model on an NVIDIA GPU with llama.cpp (its GPU backend) and
with Ember's own cuda engine: what the backend choice reads to send a GGUF model to the cuda
engine instead of llama.cpp, which is the default (app.runtime.backend_choice).

A row is added from a GPU run (benchmarks/gpu_checks.sh: the `llama` step gives llama.cpp's
figure, benchmarks/engine.py the cuda engine's on the same shape), with the command and the
date; docs/notes/backend-choice.md shows the table and how it was measured. Where no row
answers for a GPU, architecture and quantization, llama.cpp runs the model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    gpu: str  # a word of the GPU's name as nvidia-smi gives it ("H200", "RTX 4090")
    architecture: str  # GGUF general.architecture ("llama", "qwen2")
    quant: str  # the GGUF file's quantization ("Q4_K_M")
    llamacpp_tps: float  # decode tokens/s at batch 1, llama.cpp with every layer on the GPU
    llamacpp_backend: str  # "CUDA" or "Vulkan"
    cuda_tps: float  # the same with Ember's cuda engine (its default plan for the file)
    measured: str  # date and command


# No GPU run has measured both engines on the same GGUF yet (docs/notes/backend-choice.md).
MEASURED: tuple[Measured, ...] = ()


def cuda_faster(gpu_name: str, architecture: str | None, quant: str | None,
                table: tuple[Measured, ...] = MEASURED) -> Measured | None:
    """The row where Ember's cuda engine was measured faster than llama.cpp on this GPU for
    this architecture and quantization, if there is one."""
    name = gpu_name.lower()
    return next((m for m in table if m.gpu.lower() in name and m.architecture == architecture
                 and m.quant.lower() == (quant or "").lower()
                 and m.cuda_tps > m.llamacpp_tps), None)
