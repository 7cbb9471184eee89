"""The memory bandwidth a device-to-device copy reaches in torch, the practical limit the GPU
checks measure decode against (issue 44: "% of the bandwidth a copy reaches, in the same
run"). A copy reads and writes each byte, so GB/s = 2 x bytes / seconds, as
backends.llamacpp.device_bandwidth counts it. Median of `--repeats` copies after a warm-up
one, timed with CUDA events. Prints JSON.

    python3 benchmarks/copy_bandwidth.py [--gib 2] [--repeats 10]

Without a CUDA device it copies a CPU tensor (`--gib` / 16 by default there), which says what
this machine's memory does, not a GPU's: the JSON's `device` says which ran.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def copy_seconds(src: torch.Tensor, dst: torch.Tensor, repeats: int) -> list[float]:
    """Seconds of each of `repeats` copies of src into dst (after one untimed)."""
    dst.copy_(src)
    out: list[float] = []
    if src.device.type == "cuda":
        torch.cuda.synchronize()
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        return out
    for _ in range(repeats):
        t = time.perf_counter()
        dst.copy_(src)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=None,
                    help="bytes copied, in GiB (default 2 on a GPU, 1/8 on a CPU)")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be at least 1, not {args.repeats}")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    gib = args.gib if args.gib is not None else (2.0 if cuda else 0.125)
    if gib <= 0:
        raise SystemExit(f"--gib must be positive, not {gib}")
    n = int(gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)  # pages really written
    dst = torch.empty_like(src)
    times = copy_seconds(src, dst, args.repeats)
    med = statistics.median(times)
    print(json.dumps({
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "bytes": n, "repeats": args.repeats,
        "copy_gbs": round(2 * n / med / 1e9, 1),
        "copy_gbs_best": round(2 * n / min(times) / 1e9, 1),
        "ms_median": round(1e3 * med, 3),
        "counting": "read + write: 2 x bytes / seconds",
    }, indent=2))


if __name__ == "__main__":
    main()
