"""Ember's own engine (PyTorch): paged KV cache with prefix caching, continuous batching,
CUDA graphs on NVIDIA GPUs, and a float32 CPU path so CI tests it on every change.

`CudaBackend` is imported on first use, so `backends.cuda.kv_layout` (plain Python, read by
the fit model) imports without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backends.cuda.backend import CudaBackend

__all__ = ["CudaBackend"]


def __getattr__(name: str) -> Any:
    if name == "CudaBackend":
        from backends.cuda.backend import CudaBackend

        return CudaBackend
    raise AttributeError(f"module 'backends.cuda' has no attribute {name!r}")
