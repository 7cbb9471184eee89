"""GGUF models through llama-cpp-python: `LlamaCppBackend` on a multi-sequence `engine`.

The CPU variant is chosen here, before any module of this package imports `llama_cpp`
(which reads LLAMA_CPP_LIB_PATH once, at import): see cpu_variant.
"""

from backends.llamacpp import cpu_variant

cpu_variant.chosen = cpu_variant.apply()

from backends.llamacpp.backend import LlamaCppBackend  # noqa: E402  (after the choice)

__all__ = ["LlamaCppBackend"]
