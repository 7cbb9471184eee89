"""Which backend runs a model on this machine, and why (shown by `ember hw` and the GUI).

The rule: a GGUF model runs on llama.cpp, on the GPU where llama.cpp has a backend for it
(Vulkan, CUDA, Metal); on an NVIDIA GPU with a working torch CUDA, Ember's CUDA engine runs a
GGUF model only where it was measured faster for that GPU, architecture and quantization
(app.runtime.backend_speeds), or where llama.cpp has no backend for the GPU, and it runs
safetensors models (llama.cpp cannot load them). Apple Silicon runs MLX for a model in MLX
format; everything else runs llama.cpp. The user overrides it per request (`--backend`, a
request's `backend` option) or per model in config.toml:

    [models."qwen2.5-coder-0.5b-instruct"]
    backend = "llamacpp"
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from app import config
from app.errors import ConfigError
from app.hardware import HardwareProfile
from app.install_hint import NOT_IN_BUILD, install_command
from app.runtime.backend_speeds import cuda_faster
from app.runtime.backend_table import BACKENDS, NAMES, check_backend

CUDA_FORMATS = BACKENDS["cuda"].capabilities.formats


@dataclass(frozen=True)
class BackendChoice:
    name: str
    reason: str


def preferred_format(hw: HardwareProfile) -> str | None:
    """The format auto-selection prefers here when a model comes in several: MLX on Apple
    Silicon (native on its unified memory, and what the mlx backend loads); elsewhere none."""
    return "mlx" if hw.apple_chip else None


def _llama_cpp() -> Any | None:
    """The llama_cpp module of the CPU build this process runs (backends.llamacpp picks it
    before llama_cpp loads); None where it is not installed, or a forced variant this CPU
    cannot run (the backend says so when it loads a model)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    from backends.errors import EmberError
    try:
        import backends.llamacpp  # noqa: F401
    except EmberError:
        return None
    import llama_cpp

    return llama_cpp


def llama_cpp_system_info() -> str | None:
    """llama.cpp's line of compiled-in CPU features (AVX2 = 1 | ...), None without it."""
    llama_cpp = _llama_cpp()
    return None if llama_cpp is None else str(
        llama_cpp.llama_print_system_info().decode(errors="replace"))


def llama_cpp_gpu_offload(vendor: str | None = None) -> bool:
    """Whether llama.cpp can offload to a GPU here (of `vendor`, where named): a device its
    run-time-loaded backends found (app.runtime.gpu_devices, asked in a child process), or a
    build with a GPU backend compiled in (Metal on macOS, a development wheel built for
    CUDA)."""
    from app.runtime.gpu_devices import gpu_devices

    if any(vendor is None or d.vendor == vendor for d in gpu_devices().devices):
        return True
    llama_cpp = _llama_cpp()
    return llama_cpp is not None and bool(llama_cpp.llama_supports_gpu_offload())


def configured_backend(model_id: str, paths: config.Paths | None = None) -> str | None:
    """The backend config.toml sets for `model_id` ([models."ID"] backend = ...), if any."""
    entry = config.load_config(paths).get("models", {}).get(model_id, {})
    name = entry.get("backend") if isinstance(entry, dict) else None
    if name is None:
        return None
    if name not in BACKENDS:
        raise ConfigError(f"config.toml [models.\"{model_id}\"]: unknown backend {name!r} "
                          f"(choose one of {', '.join(NAMES)})")
    return name


def _llamacpp(hw: HardwareProfile, offload: bool, why_not: str = "") -> BackendChoice:
    simd = next((f.upper() for f in ("avx512f", "avx2", "neon") if f in hw.isa), "generic")
    simd = simd.replace("AVX512F", "AVX-512")
    if hw.has_nvidia:
        gpu = max((g for g in hw.gpus if g.vendor == "nvidia"), key=lambda g: g.vram_total)
        how = ("with GPU offload" if offload else
               "on the CPU: none of its backends drives this GPU here (no Vulkan driver "
               "answered, and its CUDA backend is not installed: `ember cuda install`)")
        return BackendChoice("llamacpp", f"{_nvidia_name(gpu.name)} "
                                         f"({gpu.vram_total / 2**30:.0f} GB): "
                                         f"llama.cpp {how}{why_not}")
    others = [g for g in hw.gpus if g.llama_backend and g.vendor not in ("nvidia", "apple")]
    if others:
        gpu = max(others, key=lambda g: g.vram_total)
        memory = "shares the system's memory" if gpu.shared_memory else \
            f"{gpu.vram_total / 2**30:.0f} GB"
        return BackendChoice("llamacpp", f"{gpu.name} ({memory}): llama.cpp with "
                                         f"{gpu.llama_backend}{why_not}")
    if hw.apple_chip:
        how = "with Metal" if offload else "on the CPU (this build has no Metal)"
        return BackendChoice("llamacpp", f"Apple {hw.apple_chip}, unified memory: llama.cpp "
                                         f"{how}{why_not}")
    return BackendChoice("llamacpp", f"no GPU: llama.cpp on the CPU ({hw.physical_cores} "
                                     f"cores, {simd}, {hw.cpu_bandwidth_gbps:.0f} GB/s)")


def _cuda_choice(hw: HardwareProfile, gpu_offload: bool | None,
                 formats: tuple[str, ...] | None,
                 model: tuple[str, str] | None) -> BackendChoice | None:
    """Ember's cuda engine where it should run on this NVIDIA GPU with torch CUDA, else None
    (llama.cpp): a model llama.cpp cannot load, a GPU llama.cpp has no backend for, or a
    GGUF model it was measured faster for."""
    gpu = max((g for g in hw.gpus if g.vendor == "nvidia"), key=lambda g: g.vram_total)
    where = (f"{_nvidia_name(gpu.name)} ({gpu.vram_total / 2**30:.0f} GB) with torch "
             f"{hw.torch_cuda} CUDA")
    if formats is not None and "gguf" not in formats:
        return BackendChoice("cuda", f"{where}: Ember's CUDA engine (llama.cpp does not load "
                                     f"{' or '.join(formats)})")
    offload = llama_cpp_gpu_offload("nvidia") if gpu_offload is None else gpu_offload
    if not offload:
        return BackendChoice("cuda", f"{where}: Ember's CUDA engine (llama.cpp has no backend "
                                     "for this GPU here and would run on the CPU)")
    architecture, quant = model if model is not None else (None, None)
    row = cuda_faster(gpu.name, architecture, quant)
    if row is None:
        return None
    return BackendChoice("cuda", f"{where}: Ember's CUDA engine, measured faster for "
                                 f"{architecture} {quant} on {row.gpu} ({row.cuda_tps:g} against "
                                 f"llama.cpp's {row.llamacpp_tps:g} tokens/s with "
                                 f"{row.llamacpp_backend}; {row.measured})")


def _nvidia_name(name: str) -> str:
    """nvidia-smi's names mostly start with the vendor already ("NVIDIA GeForce RTX 4090")."""
    return name if name.upper().startswith("NVIDIA") else f"NVIDIA {name}"


def choose_backend(hw: HardwareProfile, gpu_offload: bool | None = None,
                   formats: tuple[str, ...] | None = None, requested: str | None = None,
                   configured: str | None = None,
                   model: tuple[str, str] | None = None) -> BackendChoice:
    """The backend for a model available in `formats` (None: any model, as `ember hw` asks),
    `model` its (architecture, quantization) where known. `requested` (this request) wins
    over `configured` (config.toml), which wins over the hardware rule."""
    if requested is not None:
        return BackendChoice(check_backend(requested), "asked for in this request")
    if configured is not None:
        return BackendChoice(check_backend(configured), "set for this model in config.toml")
    cuda_loads = formats is None or any(f in CUDA_FORMATS for f in formats)
    if hw.has_nvidia and hw.torch_cuda and cuda_loads:
        cuda = _cuda_choice(hw, gpu_offload, formats, model)
        if cuda is not None:
            return cuda
    offload = llama_cpp_gpu_offload() if gpu_offload is None else gpu_offload
    if formats is not None and "mlx" in formats and "gguf" not in formats:
        return BackendChoice("mlx", "the model is in MLX format, which only MLX loads")
    if hw.apple_chip and formats is not None and "mlx" in formats:
        return BackendChoice("mlx", f"Apple {hw.apple_chip}, unified memory: MLX (the model "
                                    "has an MLX variant)")
    why_not = ""
    if hw.has_nvidia and not hw.torch_cuda:
        command = install_command("cuda")
        why_not = ("; the cuda backend needs torch with CUDA" +
                   (f" ({command})" if command else f", which is {NOT_IN_BUILD}"))
    elif hw.has_nvidia and formats is not None and "gguf" in formats:
        why_not = ("; Ember's CUDA engine runs a GGUF model only where it was measured faster "
                   "(none measured for this one: docs/notes/backend-choice.md)")
    elif hw.has_nvidia and formats is None:
        why_not = ("; Ember's CUDA engine runs safetensors models, and GGUF ones where it was "
                   "measured faster (docs/notes/backend-choice.md)")
    elif hw.has_nvidia:
        why_not = f"; the cuda backend loads {' or '.join(CUDA_FORMATS)}, not {formats}"
    elif hw.apple_chip:
        why_not = ("; MLX is used for models with an MLX variant" if formats is None
                   else "; this model has no MLX variant")
    return _llamacpp(hw, offload, why_not)
