"""When to offer llama.cpp's CUDA backend: an NVIDIA GPU that llama.cpp drives through Vulkan
(or not at all) because the module is not installed, and a manifest that says where to get
it (`EMBER_CUDA_MANIFEST`, else the one this Ember ships). `ember hw`'s note and the Machine
page's button read it; nothing here touches the network."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

from app import resources
from app.config import Paths
from app.gpu_module.installed import installed
from backends.gpu_modules import llama_cpp_version

MANIFEST_ENV = "EMBER_CUDA_MANIFEST"
MANIFEST_FILE = "cuda-module.json"


class _Gpu(Protocol):
    vendor: str


def cuda_missing(gpus: Sequence[_Gpu]) -> bool:
    """An NVIDIA GPU here, and no CUDA device among llama.cpp's."""
    from app.runtime.gpu_devices import gpu_devices

    return any(g.vendor == "nvidia" for g in gpus) and not any(
        d.backend == "CUDA" for d in gpu_devices().devices)


def manifest_named() -> str | None:
    """Where `ember cuda install` reads its manifest without --from, or None."""
    if os.environ.get(MANIFEST_ENV):
        return os.environ[MANIFEST_ENV]
    shipped = resources.asset(MANIFEST_FILE)
    return str(shipped) if shipped.is_file() else None


def vulkan_runs_nvidia() -> bool:
    """llama.cpp drives an NVIDIA card through Vulkan meanwhile (else: not at all)."""
    from app.runtime.gpu_devices import gpu_devices

    return any(d.vendor == "nvidia" and d.backend == "Vulkan" for d in gpu_devices().devices)


def offer_cuda_module(gpus: Sequence[_Gpu], home: Paths) -> bool:
    """An NVIDIA GPU that llama.cpp drives without CUDA, a download that says where the CUDA
    module is, and none installed for this llama.cpp yet (one installed loads with the next
    model, not in this window's hardware report; one for another llama.cpp never loads)."""
    have = installed(home, "cuda")
    return (manifest_named() is not None and cuda_missing(gpus)
            and (have is None or have.llama_cpp_version != llama_cpp_version()))
