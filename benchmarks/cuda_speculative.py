"""Speculative decoding in the cuda backend: greedy decode tokens/s without speculation,
with the draft model and with prompt lookup, their acceptance, and whether each answer is
the plain one. "auto" lets the cost model pick the draft length (and switch off);
`--fixed` also runs every method at max_draft each step. `--repeat N` runs the modes in
turn N times and keeps each one's best rate (other jobs on the machine slow some runs).
Beside wall-clock tokens/s it reports CPU seconds per token of this process: on a CPU the
decode steps run on one thread, so that figure hardly moves when other jobs share the
cores, while the wall clock can move by half. Prints JSON.

    .venv/bin/python benchmarks/cuda_speculative.py [--prompts edit,write] [--tokens 20]

On a CPU the models run in float32 (about 1 token/s for the 1.5B on 2 cores): keep the
prompts few and the answers short.

    python3 benchmarks/cuda_speculative.py --random llama3-8b --draft-shape llama3.2-1b

`--random` (for a GPU, where nothing can be downloaded) builds a target and a draft of those
shapes with random weights and the same vocabulary, and measures what speculation costs
rather than what it gains (random models agree on nothing): the target's verification step
of 1 + k rows for k = 1..8 proposed tokens, as a multiple of its plain decode step (with and
without CUDA graphs), and the draft's proposing step. Medians over `--steps` steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from app.hardware import detect
from app.store import Store
from backends.base import (
    DoneEvent,
    GenerationRequest,
    LoadPlan,
    Message,
    SamplingParams,
    SpeculativeParams,
)
from backends.cuda import CudaBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.engine, run as a script

PROMPTS = {
    "edit": "Repeat this code with one change: rename `total` to `acc`.\n\n```python\n"
            "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
            "    return total / len(values)\n```",
    "hints": "Add type hints to this function and change nothing else.\n\n```python\n"
             "def scale(points, factor):\n    out = []\n    for x, y in points:\n"
             "        out.append((x * factor, y * factor))\n    return out\n```",
    "write": "Write a Python function that checks whether a string is a palindrome.",
}


def run(backend: CudaBackend, prompt: str, tokens: int,
        spec: SpeculativeParams | None) -> tuple[DoneEvent, float]:
    """The answer, and this process's CPU seconds per answer token (the prompt is cached
    after the first run, so that is the decoding's)."""
    request = GenerationRequest(messages=(Message("user", prompt),), speculative=spec,
                                sampling=SamplingParams(temperature=0.0, max_tokens=tokens))
    start = time.process_time()
    done = [e for e in backend.generate(request) if isinstance(e, DoneEvent)]
    if not done:
        raise RuntimeError(f"no answer for {prompt[:40]!r}")
    return done[0], (time.process_time() - start) / done[0].stats.completion_tokens


def step_times(engine, seq, steps: int) -> list[float]:
    """The target's seconds per decode/verify step (the engine's own timing, synchronized),
    over `steps` steps once the prompt is in."""
    engine.add(seq)
    while seq.num_output == 0:
        engine.step()
    engine.step()  # warm-up at this shape
    out: list[float] = []
    while len(out) < steps and seq.status.value != "finished":
        engine.step()
        if engine.speculator.step_s is not None:
            out.append(engine.speculator.step_s)
    engine.finish(seq)
    return out


def random_verification(shape: str, draft_shape: str, steps: int, max_k: int) -> dict:
    import torch

    from backends.cuda.backend import pick_device
    from backends.cuda.engine import GREEDY, Engine, EngineConfig
    from backends.cuda.sequence import Sequence
    from benchmarks.engine import SHAPES, random_model

    device, dtype = pick_device()
    target_cfg, draft_cfg = SHAPES[shape], SHAPES[draft_shape]
    if target_cfg.vocab_size != draft_cfg.vocab_size:
        raise SystemExit(f"{shape} and {draft_shape} have different vocabularies")
    target = random_model(target_cfg, device, dtype)
    draft = random_model(draft_cfg, device, dtype)
    prompt = torch.randint(100, target_cfg.vocab_size - 100, (256,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    budget = steps + 8

    def engine(graphs: bool) -> Engine:
        e = Engine(target, EngineConfig(context=1024, max_seqs=1, max_tokens=512,
                                        adaptive_speculation=False, cuda_graphs=graphs),
                   device, dtype)
        e.use_draft(draft, Path(f"random-{draft_shape}"))
        return e

    ms = lambda xs: round(1e3 * statistics.median(xs), 3)  # noqa: E731
    plain = ms(step_times(engine(True), Sequence(list(prompt), GREEDY, budget), steps))
    eager = ms(step_times(engine(False), Sequence(list(prompt), GREEDY, budget), steps))
    spec_engine = engine(True)
    rows: dict = {}
    for k in range(1, max_k + 1):
        spec = SpeculativeParams(method="draft", draft_model=draft_shape, max_draft=k,
                                 adaptive=False)
        t = ms(step_times(spec_engine, Sequence(list(prompt), GREEDY, budget * (k + 1),
                                                speculative=spec), steps))
        rows[str(k)] = {"verify_ms": t, "x_decode_step": round(t / plain, 2),
                        "x_eager_decode_step": round(t / eager, 2)}
    draft_s = spec_engine.speculator.draft.step_s
    return {"target": f"random {shape}", "draft": f"random {draft_shape}",
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "dtype": str(dtype).removeprefix("torch."), "prompt_tokens": len(prompt),
            "decode_step_ms": plain, "decode_step_ms_no_graphs": eager,
            "draft_step_ms": round(1e3 * draft_s, 3) if draft_s else None,
            "verification_by_k": rows,
            "note": "random weights: the proposals are rejected, so every step verifies k "
                    "tokens and keeps one; this measures the cost side only"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--prompts", default="edit,write")
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--max-draft", type=int, default=6)
    ap.add_argument("--fixed", action="store_true", help="also run with max_draft every step")
    ap.add_argument("--repeat", type=int, default=1, help="rounds; each mode's best counts")
    ap.add_argument("--random", default=None, help="a random-weight target of this shape "
                    "(benchmarks/engine.py's SHAPES): the verification cost by k")
    ap.add_argument("--draft-shape", default="llama3.2-1b")
    ap.add_argument("--steps", type=int, default=20, help="with --random: steps per k")
    args = ap.parse_args()
    if args.random:
        print(json.dumps(random_verification(args.random, args.draft_shape, args.steps,
                                             args.max_draft), indent=2))
        return
    store = Store()
    target, draft = store.get(args.model), store.get(args.draft)
    hw = detect()
    backend = CudaBackend(max_seqs=1)
    backend.load(target, LoadPlan(context=1024, threads=max(1, hw.physical_cores), batch=256))
    methods = {
        "draft": SpeculativeParams(method="draft", draft_model=draft.id,
                                   max_draft=args.max_draft, draft_path=str(draft.path)),
        "lookup": SpeculativeParams(method="lookup", max_draft=args.max_draft),
    }
    speculator = backend.engine.speculator
    result: dict = {"model": target.id, "draft": draft.id, "device": str(backend.device),
                    "cpu": hw.cpu, "dtype": str(backend.dtype).removeprefix("torch."),
                    "greedy_tokens": args.tokens, "repeat": args.repeat, "prompts": {}}
    adaptive = [("auto", True)] + ([("fixed", False)] if args.fixed else [])
    modes = [("plain", None, True)] + [(f"{m}_{a}", spec, on) for m, spec in methods.items()
                                       for a, on in adaptive]
    for name in args.prompts.split(","):
        best: dict[str, DoneEvent] = {}
        texts: dict[str, set[str]] = {}
        cpu: dict[str, float] = {}
        # the prompt into both models' prefix caches: the draft's prefill of the prompt
        # is a cost of the first request of a conversation, not of decoding
        for spec in [None, *methods.values()]:
            run(backend, PROMPTS[name], 4, spec)
        for _ in range(args.repeat):
            for mode, spec, on in modes:
                speculator.adaptive = on
                done, cpu_s = run(backend, PROMPTS[name], args.tokens, spec)
                texts.setdefault(mode, set()).add(done.text)
                cpu[mode] = min(cpu.get(mode, cpu_s), cpu_s)
                if mode not in best or done.stats.decode_tokens_per_s > \
                        best[mode].stats.decode_tokens_per_s:
                    best[mode] = done
        speculator.adaptive = True
        plain = best.pop("plain")
        row: dict = {"plain_tok_s": plain.stats.decode_tokens_per_s,
                     "plain_cpu_s_per_token": round(cpu["plain"], 3)}
        for mode, done in best.items():
            st = done.stats
            row[mode] = {
                "tok_s": st.decode_tokens_per_s,
                "speedup": round(st.decode_tokens_per_s / plain.stats.decode_tokens_per_s, 2)
                if plain.stats.decode_tokens_per_s else None,
                "cpu_s_per_token": round(cpu[mode], 3),
                "cpu_speedup": round(cpu["plain"] / cpu[mode], 2),
                "draft_tokens": st.draft_tokens, "accepted_tokens": st.accepted_tokens,
                "acceptance": round(st.accepted_tokens / st.draft_tokens, 2)
                if st.draft_tokens else None,
                "identical": texts[mode] == {plain.text}}
        result["prompts"][name] = row
    result["step_seconds_by_rows"] = {r: round(t, 3) for r, t in
                                      sorted(speculator.times.rows.items())}
    draft_model = speculator.draft
    result["draft_step_seconds"] = round(draft_model.step_s, 3) \
        if draft_model is not None and draft_model.step_s else None
    result["threads"] = max(1, hw.physical_cores)
    result["note"] = ("measured on a shared machine (other jobs on the same cores): "
                      "compare the rates within one run, not across runs")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
