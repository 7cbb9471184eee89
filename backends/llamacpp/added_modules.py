"""GPU backend modules installed after Ember, beside its llama.cpp build: llama.cpp's CUDA
backend (`ember cuda install`, app.gpu_module) is too large to ship in every bundle, so it is
downloaded into the data folder. Each module lies in a folder of its own, with the runtime
libraries it links beside it (its RUNPATH is `$ORIGIN`) and the `module.json` it was installed
from.

The app names the folder that holds them in `EMBER_LLAMA_MODULES` (backends.gpu_modules;
app.gpu_module.installed sets it for the processes it starts), so the engine's worker and
the GPU probe find them without knowing where Ember keeps its data. A module is loaded only
when its manifest says it was built for the llama-cpp-python that runs (ggml's ABI is that
build's), for this platform.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from backends.gpu_modules import (
    BACKENDS,
    MANIFEST_NAME,
    MODULES_ENV,
    llama_cpp_version,
    this_platform,
)


@dataclass(frozen=True)
class AddedModule:
    backend: str  # cuda
    path: Path  # .../llama-modules/cuda/libggml-cuda.so


def added_modules(environ: Mapping[str, str] = os.environ,
                  version: str | None = None) -> tuple[list[AddedModule], list[str]]:
    """The modules installed under EMBER_LLAMA_MODULES that this llama.cpp can load, and one
    line for each that it cannot (another build's, another platform's, damaged)."""
    root = environ.get(MODULES_ENV)
    if not root or not Path(root).is_dir():
        return [], []
    version = version or llama_cpp_version()
    usable: list[AddedModule] = []
    refused: list[str] = []
    for folder in sorted(p for p in Path(root).iterdir() if p.is_dir()
                         and not p.name.startswith(".")):
        manifest = folder / MANIFEST_NAME
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            backend = str(data["backend"])
            built_for = str(data["llama_cpp_version"])
            made_on = str(data["platform"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            refused.append(f"{folder}: no readable {MANIFEST_NAME} ({type(e).__name__}); "
                           "install the module again")
            continue
        if backend != folder.name or backend not in BACKENDS:
            refused.append(f"{folder}: its {MANIFEST_NAME} names backend {backend!r:.40}; "
                           "install the module again")
            continue
        module = folder / f"libggml-{backend}.so"
        if built_for != version:
            refused.append(f"{module.name} in {folder} was built for llama-cpp-python "
                           f"{built_for}, and Ember runs {version}: install it again")
        elif made_on != this_platform():
            refused.append(f"{module.name} in {folder} is for {made_on}, not {this_platform()}")
        elif not module.is_file():
            refused.append(f"{folder}: {module.name} is missing; install the module again")
        else:
            usable.append(AddedModule(backend, module))
    return usable, refused
