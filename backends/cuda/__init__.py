"""Ember's own engine (PyTorch): paged KV cache with prefix caching, continuous batching,
CUDA graphs on NVIDIA GPUs, and a float32 CPU path so CI tests it on every change."""

from backends.cuda.backend import CudaBackend

__all__ = ["CudaBackend"]
