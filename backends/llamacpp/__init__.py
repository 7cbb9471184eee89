"""GGUF models through llama-cpp-python: `LlamaCppBackend` on a multi-sequence `engine`.

Importing this package chooses the CPU variant (cpu_variant) and loads llama.cpp's CPU backend
into this process (ggml_backends), before anything initialises llama.cpp: a build made with
GGML_BACKEND_DL has no backend until one is loaded. GPU backends are loaded only where models
run (the engine's worker, `LlamaCppBackend.load`), so a GPU driver's crash never reaches the
window's process. Code that uses `llama_cpp` directly imports this package first.
"""

from backends.llamacpp import cpu_variant, ggml_backends

cpu_variant.chosen = cpu_variant.apply()
ggml_backends.load_backends(gpu=False)

from backends.llamacpp.backend import LlamaCppBackend  # noqa: E402  (after the backends)

__all__ = ["LlamaCppBackend"]
