"""Where downloaded GPU backend modules live (`DATA/llama-modules/<backend>/`), what is
installed there, and how the processes Ember starts find them (backends.llamacpp.added_modules
reads `EMBER_LLAMA_MODULES`)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from app.config import Paths
from backends.gpu_modules import MANIFEST_NAME, MODULES_ENV


def modules_root(p: Paths) -> Path:
    return p.home / "llama-modules"


def module_folder(p: Paths, backend: str) -> Path:
    return modules_root(p) / backend


def export_modules_root(p: Paths) -> None:
    """Name the data folder's modules to every process started from here on (the engine's
    workers and the GPU probe are spawned, and inherit the environment). A value already set
    (a test, a user with modules elsewhere) is kept."""
    os.environ.setdefault(MODULES_ENV, str(modules_root(p)))


@dataclass(frozen=True)
class InstalledModule:
    backend: str
    folder: Path
    llama_cpp_version: str
    toolkit: str
    architectures: str
    bytes_on_disk: int
    installed_from: str
    installed_at: str


def installed(p: Paths, backend: str) -> InstalledModule | None:
    """The module of `backend` in the data folder, or None (none, or no readable manifest)."""
    folder = module_folder(p, backend)
    try:
        data = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
        return InstalledModule(
            backend=backend, folder=folder, llama_cpp_version=str(data["llama_cpp_version"]),
            toolkit=str(data.get("toolkit", "")), architectures=str(data.get("architectures", "")),
            bytes_on_disk=sum(f.stat().st_size for f in folder.iterdir() if f.is_file()),
            installed_from=str(data.get("installed_from", "")),
            installed_at=str(data.get("installed_at", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove(p: Paths, backend: str) -> bool:
    """Remove the installed module of `backend` (and what an unfinished install left);
    False when there was none."""
    root = modules_root(p)
    found = False
    for path in (module_folder(p, backend), root / f".new-{backend}", root / f".old-{backend}",
                 root / ".partial" / backend):
        if path.exists():
            found = found or path == module_folder(p, backend)
            shutil.rmtree(path)
    return found
