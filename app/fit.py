"""The fit model: will a model fit here, and how to load it (the load plan).

This first version plans CPU loads for llama.cpp: context size and threads. Memory is
weights (the file's tensor bytes) + KV cache (f16 K and V for every layer and token) + a
compute buffer; the context is cut down until that fits in the RAM Ember may use.
"""

from __future__ import annotations

from app.config import env_int
from app.gguf_file import GGUFInfo
from app.hardware import HardwareProfile
from backends.base import LoadPlan

DEFAULT_CONTEXT = 4096
MIN_CONTEXT = 512
RAM_SHARE = 0.8  # of available RAM; the rest stays for the OS and the app
COMPUTE_BUFFER_BYTES = 300 << 20  # llama.cpp's CPU compute buffer for small models (measured)


def memory_bytes(info: GGUFInfo, context: int, parallel: int = 1) -> dict[str, int]:
    return {"weights": info.data_bytes,
            "kv_cache": info.kv_bytes_per_token * context * parallel,
            "buffers": COMPUTE_BUFFER_BYTES}


def plan_load(info: GGUFInfo, hw: HardwareProfile, context: int | None = None) -> LoadPlan:
    wanted = context or env_int("EMBER_CONTEXT") or DEFAULT_CONTEXT
    ctx = max(MIN_CONTEXT, min(wanted, info.context_length))
    budget = int(hw.ram_available * RAM_SHARE)
    while ctx > MIN_CONTEXT and sum(memory_bytes(info, ctx).values()) > budget:
        ctx //= 2
    threads = env_int("EMBER_THREADS") or hw.physical_cores
    parts = memory_bytes(info, ctx)
    reason = (f"CPU: {parts['weights'] / 1e9:.2f} GB weights + {parts['kv_cache'] / 1e9:.2f} GB "
              f"KV at {ctx} context + {parts['buffers'] / 1e9:.2f} GB buffers; "
              f"{threads} threads")
    if ctx < min(wanted, info.context_length):
        reason += f" (context cut from {wanted} to fit {budget / 1e9:.1f} GB of RAM)"
    return LoadPlan(context=ctx, threads=threads, reason=reason)
