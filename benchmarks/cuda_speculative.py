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
"""

from __future__ import annotations

import argparse
import json
import time

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--prompts", default="edit,write")
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--max-draft", type=int, default=6)
    ap.add_argument("--fixed", action="store_true", help="also run with max_draft every step")
    ap.add_argument("--repeat", type=int, default=1, help="rounds; each mode's best counts")
    args = ap.parse_args()
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
