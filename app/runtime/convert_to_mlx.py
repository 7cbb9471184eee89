"""`ember convert MODEL --to mlx`: an installed GGUF model becomes an installed MLX model.

The directory is built under `models/.partial/` and moved into the store only when complete,
so a failed or interrupted conversion never shows up as an installed model.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from app.store import InstalledModel, Store
from backends.errors import EmberError

MLX_SUFFIX = "-mlx"  # `ember convert qwen` installs `qwen-mlx:4bit`


def mlx_id(model_id: str) -> str:
    return model_id if model_id.endswith(MLX_SUFFIX) else model_id + MLX_SUFFIX


def convert_to_mlx(name: str, bits: int = 4, store: Store | None = None,
                   on_step: Callable[[str], None] | None = None) -> InstalledModel:
    from backends.mlx.gguf_to_mlx import convert_gguf

    store = store or Store()
    source = store.get(name)
    if source.format != "gguf":
        raise EmberError(f"{source.ref} is already {source.format}; `ember convert` reads an "
                         "installed GGUF model")
    target_id, quant = mlx_id(source.id), f"{bits}bit"
    for m in store.list():
        if m.id == target_id and m.quant == quant:
            raise EmberError(f"{m.ref} is already installed ({m.path}); "
                             f"`ember rm {m.ref}` first to convert again")
    work = store.paths.partial / f"convert-{target_id}-{quant}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        result = convert_gguf(source.path, work, bits, on_step)
        return store.install_directory(work, target_id, quant, "mlx", result.architecture,
                                       result.context_length, result.chat and source.chat,
                                       origin="converted")
    finally:
        shutil.rmtree(work, ignore_errors=True)
