"""A GPU's memory bandwidth, measured through ggml itself: a device-to-device copy of a
buffer on that device, timed, the best of several (others' work on the GPU only lowers what a
copy sees, so the best is the truest). A copy reads and writes each byte: the bandwidth is
twice the bytes over the time.

ggml_backend_tensor_copy between two tensors of one device is the backend's own buffer copy:
Vulkan records a vkCmdCopyBuffer on the device's transfer queue and waits on its fence, CUDA
a cudaMemcpyAsync device-to-device and a stream synchronize, so each call's time is the
copy's. It runs where the GPU backends are loaded: the short child that asks for the devices
(app.runtime.gpu_devices), never the app's own process.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

COPY_BYTES = 256 << 20  # per buffer (two of them), less where the device has less to spare
MIN_COPY_BYTES = 16 << 20
REPEATS = 5
GGML_TYPE_I8 = 24  # ggml.h enum ggml_type


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p),
                ("no_alloc", ctypes.c_bool)]


def _bind(lib: Any) -> None:
    p, s = ctypes.c_void_p, ctypes.c_size_t
    for name, res, args in (
        ("ggml_tensor_overhead", s, []), ("ggml_init", p, [_InitParams]),
        ("ggml_free", None, [p]), ("ggml_new_tensor_1d", p, [p, ctypes.c_int, ctypes.c_int64]),
        ("ggml_backend_alloc_ctx_tensors_from_buft", p, [p, p]),
        ("ggml_backend_buffer_free", None, [p]), ("ggml_backend_tensor_copy", None, [p, p]),
        ("ggml_backend_buffer_clear", None, [p, ctypes.c_uint8]),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def copy_bytes(memory_free: int, max_buffer: int) -> int:
    """Each buffer's size: COPY_BYTES, at most an eighth of the free memory (the two buffers
    take a quarter) and half the largest buffer the device allocates."""
    limits = [COPY_BYTES, memory_free // 8] + ([max_buffer // 2] if max_buffer else [])
    return max(0, min(limits)) // (1 << 20) << 20


def copy_bandwidth(lib: Any, device: int, size: int, repeats: int = REPEATS) -> float | None:
    """GB/s of the best of `repeats` copies of `size` bytes within ggml device `device` (a
    ggml_backend_dev_t), or None where the device cannot hold the two buffers."""
    if size < MIN_COPY_BYTES:
        return None
    _bind(lib)
    ctx = lib.ggml_init(_InitParams(3 * lib.ggml_tensor_overhead(), None, True))
    if not ctx:
        return None
    try:
        src = lib.ggml_new_tensor_1d(ctx, GGML_TYPE_I8, size)
        dst = lib.ggml_new_tensor_1d(ctx, GGML_TYPE_I8, size)
        buffer = lib.ggml_backend_alloc_ctx_tensors_from_buft(
            ctx, lib.ggml_backend_dev_buffer_type(device))
        if not buffer:
            return None
        try:
            # every page written first: a device whose memory is the RAM (lavapipe, an
            # iGPU) maps it lazily, and a copy from never-written pages reads one zero page
            # from the cache (lavapipe "copied" 51 GB/s on a machine that reads 16)
            lib.ggml_backend_buffer_clear(buffer, 1)
            lib.ggml_backend_tensor_copy(src, dst)
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                lib.ggml_backend_tensor_copy(src, dst)
                best = min(best, time.perf_counter() - start)
        finally:
            lib.ggml_backend_buffer_free(buffer)
    finally:
        lib.ggml_free(ctx)
    return round(2 * size / best / 1e9, 1)
