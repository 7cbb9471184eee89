"""Sweep the GEMV's launch configs (kernels.gemv_triton) for Llama-3-8B's shapes ahead of
time and keep the winners in the tuning file, so the engine's first start on this GPU does
not tune. Prints JSON: per shape, layout and row bucket, the winner, its time and GB/s, and
the default config's time.

    python -m kernels.tune [--rows 1,4,8,16] [--layouts int4,int8] [--file PATH]
    python -m kernels.tune --cpu-rehearsal   # tiny shapes, 2 configs, Triton's interpreter

Without a CUDA device only the rehearsal runs (the sweep's mechanism, not its numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path

import torch

# (name, K inputs, N outputs); fused qkv and gate_up as the fused-layer loader builds them
# the shapes the engine runs (q/k/v and gate/up fused at load) first: a sweep cut short by
# the GPU checks' budget has tuned those; the unfused ones after
LLAMA3_8B = [("qkv_fused", 4096, 6144), ("o", 4096, 4096), ("gate_up_fused", 4096, 28672),
             ("down", 14336, 4096), ("k_v", 4096, 1024), ("gate_up_each", 4096, 14336)]
REHEARSAL = [("tiny", 256, 96), ("tiny_down", 512, 40)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels.tune")
    ap.add_argument("--rows", default="1,4,8,16", help="row buckets to tune (1-16)")
    ap.add_argument("--layouts", default="int4,int8")
    ap.add_argument("--file", type=Path, default=None, help="the tuning file (default: "
                    "Ember's, kernels.gemv_config.default_tuning_file)")
    ap.add_argument("--cpu-rehearsal", action="store_true",
                    help="tiny shapes and a 2-config space in Triton's interpreter")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.cpu_rehearsal
    if not cuda:
        if not args.cpu_rehearsal:
            print("no CUDA device: the sweep runs on a GPU (or pass --cpu-rehearsal)",
                  file=sys.stderr)
            return 2
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are decorated
    from kernels.gemv_config import GemvConfig, TuningFile, default_config
    from kernels.gemv_triton import cuda_timer, gemv, layout_of, num_sms, tune, tune_key, wall_timer
    from kernels.quant import quantize

    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    tuning = TuningFile(args.file)
    timer = cuda_timer if cuda else wall_timer
    rows = [int(r) for r in args.rows.split(",")] if cuda else [1, 3]
    gen = torch.Generator(device=device).manual_seed(0)
    report: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu (interpreter)",
                    "file": str(tuning.path), "results": []}
    for name, k, n in (LLAMA3_8B if cuda else REHEARSAL):
        w_float = torch.randn(n, k, device=device, dtype=dtype, generator=gen) * 0.02
        for layout in args.layouts.split(","):
            w = quantize(w_float, layout)
            for m in rows:
                x = torch.randn(m, k, device=device, dtype=dtype, generator=gen)
                space = None if cuda else [GemvConfig(64, 64, 1), GemvConfig(32, 128, 2)]
                best, timings = tune(x, w, tuning, space, timer)
                seconds = min(s for _, s in timings)
                default = default_config(layout_of(w), m, n, k, w.group_size,
                                         num_sms(device))
                default_s = timer(partial(gemv, x, w, default))
                moved = w.nbytes() + (x.numel() + m * n) * x.element_size()
                report["results"].append({
                    "shape": name, "k": k, "n": n, "layout": layout, "rows": m,
                    "key": tune_key(x, w).text(), "configs_tried": len(timings),
                    "best": vars(best), "best_us": round(seconds * 1e6, 2),
                    "best_gbps": round(moved / seconds / 1e9, 1),
                    "default_us": round(default_s * 1e6, 2)})
                # the log keeps each winner as it comes (the file has it too): a sweep cut
                # short by a time limit still shows what it tuned
                print(json.dumps(report["results"][-1]), file=sys.stderr, flush=True)
            del w
        del w_float
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
