"""Weight-only GEMV at Llama-3-8B's shapes: achieved GB/s for bf16, int8 and int4 against the
memory bandwidth limit (gpt-fast's habit: speed shown against the physical limit). Prints
JSON.

    .venv/bin/python benchmarks/gemv.py [--rows 1] [--peak-gbps 3350]

On a CUDA device: bf16 is torch's F.linear (cuBLAS), int8/int4 the Triton kernels. Without
one it runs the plain-torch reference at a quarter of each dimension (float32 standing in
for bf16, which CPUs multiply slowly), which says how the reference path behaves here, not
what the kernels do: the JSON says which ran. (Not named kernels.py: run as a script, a
file of that name would shadow the `kernels` package.)
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial

import torch
import torch.nn.functional as F

from app.hardware import detect
from kernels.matmul import linear
from kernels.quant import PackedWeight, quantize

# (K inputs, N outputs): q/o projections, gate/up, down, and the output head
LLAMA3_8B = [(4096, 4096), (4096, 14336), (14336, 4096), (4096, 128256)]


def timed(fn, device: torch.device, min_s: float) -> float:
    """Median seconds per call (after a warm-up call)."""
    fn()
    if device.type == "cuda":
        from triton.testing import do_bench

        return do_bench(fn, warmup=25, rep=max(100, int(min_s * 1000)),
                        return_mode="median") / 1e3
    times: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_s or len(times) < 3:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def packed_bytes(w: PackedWeight | torch.Tensor) -> int:
    if isinstance(w, torch.Tensor):
        return w.numel() * w.element_size()
    return w.nbytes()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1, help="rows of x (1: decode)")
    ap.add_argument("--peak-gbps", type=float, default=None,
                    help="the memory bandwidth limit (default: the hardware report's)")
    ap.add_argument("--min-s", type=float, default=0.5, help="time per measurement")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    hw = detect()
    if cuda:
        gpu = next((g for g in hw.gpus if g.vendor == "nvidia"), None)
        peak = args.peak_gbps or (gpu.bandwidth_gbps if gpu else 0.0) or 0.0
        where, dtype, scale = torch.cuda.get_device_name(), torch.bfloat16, 1
        path = "Triton kernels (int8, int4); torch F.linear (bf16)"
    else:
        torch.set_num_threads(max(1, hw.physical_cores))
        peak = args.peak_gbps or hw.cpu_bandwidth_gbps
        where = f"{hw.cpu} ({torch.get_num_threads()} threads)"
        dtype, scale = torch.float32, 4
        path = ("plain-torch reference on the CPU, every dimension / 4, float32 for bf16: "
                "not the Triton kernels (no CUDA device)")
    result: dict = {"device": where, "path": path, "rows": args.rows, "peak_gbps": peak,
                    "peak_source": "--peak-gbps" if args.peak_gbps else hw.bandwidth_source,
                    "shapes": []}
    gen = torch.Generator(device=device).manual_seed(0)
    for k, n in LLAMA3_8B:
        k, n = k // scale, n // scale
        w = torch.randn(n, k, device=device, dtype=dtype, generator=gen) * 0.02
        x = torch.randn(args.rows, k, device=device, dtype=dtype, generator=gen)
        row: dict = {"k": k, "n": n}
        for name in ("bf16", "int8", "int4"):
            weight = w if name == "bf16" else quantize(w, name)
            op = F.linear if name == "bf16" else linear
            seconds = timed(partial(op, x, weight), device, args.min_s)
            gbps = (packed_bytes(weight) + x.numel() * x.element_size()) / seconds / 1e9
            row[name] = {"us": round(seconds * 1e6, 1), "gbps": round(gbps, 1),
                         "pct_of_peak": round(100 * gbps / peak, 1) if peak else None}
            del weight
        result["shapes"].append(row)
        del w
        if cuda:
            torch.cuda.empty_cache()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
