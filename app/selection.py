"""Which backend Ember uses on this machine, and why (shown by `ember hw` and the GUI)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from app.hardware import HardwareProfile


@dataclass(frozen=True)
class BackendChoice:
    name: str
    reason: str


def llama_cpp_gpu_offload() -> bool:
    if importlib.util.find_spec("llama_cpp") is None:
        return False
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


def choose_backend(hw: HardwareProfile, gpu_offload: bool | None = None) -> BackendChoice:
    """llama.cpp is the backend Ember ships today; this says how it will run here."""
    offload = llama_cpp_gpu_offload() if gpu_offload is None else gpu_offload
    simd = next((f.upper() for f in ("avx512f", "avx2", "neon") if f in hw.isa), "generic")
    simd = simd.replace("AVX512F", "AVX-512")
    if hw.has_nvidia:
        gpu = max((g for g in hw.gpus if g.vendor == "nvidia"), key=lambda g: g.vram_total)
        how = ("with GPU offload" if offload else
               "on the CPU: this llama-cpp-python build has no GPU offload (rebuild it with "
               "CMAKE_ARGS=-DGGML_CUDA=on to use the GPU)")
        return BackendChoice("llamacpp", f"NVIDIA {gpu.name} ({gpu.vram_total / 2**30:.0f} GB): "
                                         f"llama.cpp {how}")
    if hw.apple_chip:
        how = "with Metal" if offload else "on the CPU (this build has no Metal)"
        return BackendChoice("llamacpp", f"Apple {hw.apple_chip}, unified memory: llama.cpp "
                                         f"{how}")
    return BackendChoice("llamacpp", f"no GPU: llama.cpp on the CPU ({hw.physical_cores} "
                                     f"cores, {simd}, {hw.cpu_bandwidth_gbps:.0f} GB/s)")
