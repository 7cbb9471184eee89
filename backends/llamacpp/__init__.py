"""GGUF models through llama-cpp-python: `LlamaCppBackend` on a multi-sequence `engine`."""

from backends.llamacpp.backend import LlamaCppBackend

__all__ = ["LlamaCppBackend"]
