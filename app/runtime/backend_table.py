"""The backends a worker can run, and what each can do: the one list the backend choice, the
CLI's `--backend`, the window's settings, the Runtime's checks and the worker read, and the
bundle's spec (`hidden_imports`).

An engine is imported only inside its worker (`make_backend`): torch, MLX and llama.cpp stay
out of the app's own process, and a build without an optional engine says so in the worker's
load error instead of failing at import. The remote backend is not here: it runs in the
app's process (app.runtime.remote_streams). Each backend's own `capabilities()` must agree
with its entry (tests/integration/test_backend_table.py checks them against the real classes).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from app.install_hint import NOT_IN_BUILD, install_command
from backends.base import Backend, Capabilities
from backends.errors import EmberError, InvalidRequestError


@dataclass(frozen=True)
class BackendEntry:
    name: str
    module: str  # imported in the worker only
    cls: str
    extra: str  # the pyproject extra that brings its engine ("": Ember's own dependencies)
    capabilities: Capabilities
    needs: str = ""  # what else it needs beyond the extra, for the error that lacks it

    def missing(self) -> str:
        """How to get this backend where it is missing, for its load error."""
        command = install_command(self.extra)
        if command is None:
            return f"it is {NOT_IN_BUILD}"
        return f"it needs: {command}{' ' + self.needs if self.needs else ''}"


BACKENDS: dict[str, BackendEntry] = {e.name: e for e in (
    BackendEntry("llamacpp", "backends.llamacpp.backend", "LlamaCppBackend", "",
                 Capabilities(formats=("gguf",), batching=True, speculative=True,
                              embeddings=True, grammar=True, logprobs=True, media=True)),
    BackendEntry("cuda", "backends.cuda.backend", "CudaBackend", "cuda",
                 Capabilities(formats=("gguf", "safetensors"), batching=True, speculative=True,
                              embeddings=False, grammar=True, logprobs=True),
                 needs="on a machine with an NVIDIA GPU"),
    BackendEntry("mlx", "backends.mlx.backend", "MlxBackend", "mlx",
                 Capabilities(formats=("mlx",), batching=True, speculative=True,
                              embeddings=False, grammar=True, logprobs=True)),
)}
NAMES = tuple(BACKENDS)  # ("llamacpp", "cuda", "mlx"): the choices users see
SPECULATIVE = tuple(n for n, e in BACKENDS.items() if e.capabilities.speculative)


def check_backend(name: str) -> str:
    """`name` if it is a backend a worker can run, else a clear InvalidRequestError."""
    if name not in BACKENDS:
        raise InvalidRequestError(f"unknown backend {name!r}: choose one of {', '.join(NAMES)}")
    return name


def capabilities(name: str) -> Capabilities:
    return BACKENDS[check_backend(name)].capabilities


def hidden_imports(names: tuple[str, ...] = NAMES) -> list[str]:
    """The modules a frozen build must declare as hidden imports for backends `names`: the
    worker imports each backend by name (`make_backend`), which PyInstaller's analysis cannot
    follow; what those modules import is found from there."""
    return [BACKENDS[check_backend(n)].module for n in names]


def make_backend(name: str) -> Backend:
    """A new, unloaded backend `name` (in the worker process)."""
    if name == "remote":
        raise EmberError("the remote backend runs in the app's process, not in a worker")
    if name not in BACKENDS:
        raise EmberError(f"unknown backend {name!r} (known: {', '.join(NAMES)})")
    entry = BACKENDS[name]
    try:
        backend = getattr(importlib.import_module(entry.module), entry.cls)
    except ImportError as e:
        raise EmberError(f"the {name} backend is not available in this build ({e}); "
                         f"{entry.missing()}, or choose another with --backend") from None
    except AttributeError:
        raise EmberError(f"the {name} backend is not available in this build ({entry.module} "
                         f"has no {entry.cls})") from None
    return backend()
