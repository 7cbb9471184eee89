"""Fit model vs reality: for each real model installed, at two context sizes, the worker's
peak memory (VmHWM, peak resident set) and decode tokens/s, next to the fit model's
predictions for this machine. Prints JSON.

    .venv/bin/python benchmarks/fit_accuracy.py [--contexts 2048 8192] [--tokens 128]

Targets on the 2-core dev machine: memory within +-10%, decode speed within +-25%.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from app.fit.estimate import arch_from_gguf, estimate, file_repacked_bytes
from app.gguf_file import read_gguf
from app.hardware import detect
from app.registry import Variant
from app.runtime import Runtime
from app.store import Store
from backends.base import GenerationRequest, Message, SamplingParams

# About 1,500 tokens: long prompts are what make llama.cpp touch its attention buffers, and a
# peak measured on a short prompt would flatter the prediction.
CODE = "\n".join(f"def handler_{i}(request):\n    return respond(request, status={200 + i})"
                 for i in range(70))
PROMPT = f"Here is a module:\n{CODE}\n\nExplain what it does, then suggest improvements."


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def measure(rt: Runtime, ref: str, chat: bool, context: int, tokens: int, runs: int) -> dict:
    loaded = rt.load(ref, context=context)
    sampling = SamplingParams(temperature=0.0, max_tokens=tokens)
    request = (GenerationRequest(messages=(Message("user", PROMPT),), sampling=sampling)
               if chat else GenerationRequest(prompt=PROMPT, sampling=sampling))
    speeds = []
    for _ in range(runs):
        _, stats = rt.generate(ref, request).result()
        speeds.append(stats.decode_tokens_per_s)
    peak = peak_rss(loaded.pid)
    rt.unload(ref)
    return {"peak_bytes": peak, "decode_tokens_per_s": statistics.median(speeds)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    hw = detect()
    rows = []
    with Runtime(hardware=hw) as rt:
        for model in Store().list():
            if model.format != "gguf":
                continue  # MLX folders have their own fit (app.fit.mlx)
            info = read_gguf(model.path)
            arch = arch_from_gguf(info)
            variant = Variant("gguf", model.quant, model.path.name, info.file_size, None, ())
            for ctx in args.contexts:
                fit = estimate(model.id, arch, info.params, variant, hw, ctx,
                               repacked=file_repacked_bytes(info, hw))
                got = measure(rt, model.ref, model.chat, ctx, args.tokens, args.runs)
                rows.append({
                    # a model pulled from any Hub repo ("hub": `ember pull hf.co/...`) is
                    # predicted from the same header before its download
                    "model": model.ref, "origin": model.origin, "context": ctx,
                    "predicted_bytes": fit.memory.resident_peak,
                    "measured_peak_bytes": got["peak_bytes"],
                    "memory_error": round(fit.memory.resident_peak / got["peak_bytes"] - 1, 3),
                    "predicted_decode_tps": fit.decode_tokens_per_s,
                    "measured_decode_tps": got["decode_tokens_per_s"],
                    "speed_error": round(fit.decode_tokens_per_s / got["decode_tokens_per_s"]
                                         - 1, 3),
                    "breakdown": fit.memory.describe(ctx)})
    print(json.dumps({
        "machine": {"cpu": hw.cpu, "cores": hw.physical_cores,
                    "cpu_bandwidth_gbps": hw.cpu_bandwidth_gbps},
        "results": rows,
        "within_target": all(abs(r["memory_error"]) <= 0.10 and abs(r["speed_error"]) <= 0.25
                             for r in rows)}, indent=2))


if __name__ == "__main__":
    main()
