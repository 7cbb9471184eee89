"""Weight-only GEMV at Llama-3-8B's shapes against the physical limit (gpt-fast's habit):
per shape, bf16 `F.linear` (cuBLAS), and for int8 and int4 the 1-16 row GEMV
(kernels.gemv_triton) and the old GEMM-shaped kernel (kernels.matmul_triton), each with its
time, the bytes it must move (packed weight, scales, zeros, x and the output) and the
percentage of the bandwidth a device-to-device copy reaches in the same run. Prints JSON.

    .venv/bin/python benchmarks/gemv.py [--rows 1,8,16]
    .venv/bin/python benchmarks/gemv.py --cpu-rehearsal   # tiny shapes, interpreter, < 2 min

The GEMV runs the config the engine would: the tuning file's winner (`python -m kernels.tune`
writes it) or the default; it does not sweep here (EMBER_GEMV_TUNE unset), and the JSON says
which config ran. The rehearsal checks the script end to end on a CPU in Triton's
interpreter (float32 for bf16); its numbers say nothing about a GPU. (Not named kernels.py:
run as a script, a file of that name would shadow the `kernels` package.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.tune import LLAMA3_8B, REHEARSAL

COPY_BYTES = 1 << 30  # 1 GiB each way: far past the L2, as weights are


def timer_for(cuda: bool) -> Callable[[Callable[[], object]], float]:
    if cuda:
        from triton.testing import do_bench

        # do_bench flushes the L2 before each call: decode reads its weights from HBM
        return lambda fn: do_bench(fn, warmup=10, rep=50, return_mode="median") / 1e3

    def wall(fn: Callable[[], object]) -> float:
        fn()
        times = []
        for _ in range(2):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)
    return wall


def copy_bandwidth_gbs(device: torch.device, timer, nbytes: int) -> float:
    """A device-to-device copy of `nbytes`: read + write, as the vendors' bandwidth counts."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = timer(partial(dst.copy_, src))
    del src, dst
    return 2 * nbytes / seconds / 1e9


def entry(seconds: float, nbytes: int, copy_gbs: float) -> dict:
    gbps = nbytes / seconds / 1e9
    return {"us": round(seconds * 1e6, 2), "bytes": nbytes, "gbps": round(gbps, 1),
            "pct_of_copy": round(100 * gbps / copy_gbs, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="1", help="rows of x, comma-separated (1-16)")
    ap.add_argument("--cpu-rehearsal", action="store_true",
                    help="tiny shapes in Triton's interpreter on the CPU")
    args = ap.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu_rehearsal
    if not cuda:
        if not args.cpu_rehearsal:
            sys.exit("no CUDA device: run on a GPU, or pass --cpu-rehearsal")
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are decorated
    os.environ.pop("EMBER_GEMV_TUNE", None)
    from kernels.gemv_triton import choose_config, gemv
    from kernels.matmul_triton import matmul
    from kernels.quant import quantize

    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    timer = timer_for(cuda)
    copy_gbs = copy_bandwidth_gbs(device, timer, COPY_BYTES if cuda else 64 << 20)
    result: dict = {
        "device": torch.cuda.get_device_name() if cuda else "cpu (Triton interpreter)",
        "rehearsal": not cuda, "dtype": str(dtype).removeprefix("torch."),
        "copy_bandwidth_gbs": round(copy_gbs, 1), "shapes": []}
    gen = torch.Generator(device=device).manual_seed(0)
    rows = [int(r) for r in args.rows.split(",")] if cuda else [1]
    for name, k, n in (LLAMA3_8B if cuda else REHEARSAL):
        w = torch.randn(n, k, device=device, dtype=dtype, generator=gen) * 0.02
        packed = {q: quantize(w, q) for q in ("int8", "int4")}
        for m in rows:
            x = torch.randn(m, k, device=device, dtype=dtype, generator=gen)
            io = (x.numel() + m * n) * x.element_size()
            row: dict = {"shape": name, "k": k, "n": n, "rows": m,
                         "bf16": entry(timer(partial(F.linear, x, w)),
                                       w.numel() * w.element_size() + io, copy_gbs)}
            for q, pw in packed.items():
                config = choose_config(x, pw)
                nbytes = pw.nbytes() + io
                row[q] = {"gemv": entry(timer(partial(gemv, x, pw, config)),
                                        nbytes, copy_gbs),
                          "gemv_config": vars(config),
                          "old_gemm": entry(timer(partial(matmul, x, pw)),
                                            nbytes, copy_gbs)}
            result["shapes"].append(row)
        del w, packed
        if cuda:
            torch.cuda.empty_cache()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
