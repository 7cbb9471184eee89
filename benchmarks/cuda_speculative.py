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
without CUDA graphs: `verify_k8_over_decode_step` with --max-draft 8), the draft's
proposing step, and prompt lookup on edit prompts against plain greedy
(`lookup_speedup_edit_prompts`, with whether the answers are identical). Medians over
`--steps` steps. `--rehearse` runs all of it on a tiny shape (a CPU rehearsal, seconds).
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
from backends.cuda.model_config import ModelConfig

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


# A small llama shape for `--rehearse` on a CPU: the GPU run's code path end to end, in
# seconds (the figures mean nothing there).
REHEARSAL = ModelConfig("llama", 512, 128, 2, 4, 2, 32, 256, 1e-5, 500000.0, 2048)


def edit_prompt(vocab: int, seed: int) -> list[int]:
    """An edit prompt in token ids, for a model without a tokenizer: an instruction, then a
    block of "code" the answer would repeat with a change (what prompt lookup matches)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    instruction = torch.randint(100, vocab - 100, (24,), generator=g).tolist()
    code = torch.randint(100, vocab - 100, (160,), generator=g).tolist()
    return instruction + code + instruction[:4]


def lookup_on_edit_prompts(engine, vocab: int, tokens: int, prompts: int = 3) -> dict:
    """Greedy decode tokens/s with prompt lookup (the cost model choosing) over plain, on
    edit prompts, and whether every answer is the plain one."""
    import torch

    from backends.cuda.engine import GREEDY

    spec = SpeculativeParams(method="lookup", max_draft=8)
    sync = torch.cuda.synchronize if engine.runner.device.type == "cuda" else (lambda: None)
    seconds = {"plain": 0.0, "lookup": 0.0}
    identical, drafted, accepted = True, 0, 0
    for i in range(prompts):
        prompt = edit_prompt(vocab, seed=i)
        outs = {}
        for mode, params in (("plain", None), ("lookup", spec)):
            engine.generate([prompt], 2, GREEDY, params)  # the prompt into the prefix cache
            sync()
            start = time.perf_counter()
            seq = engine.generate_seqs([prompt], tokens, GREEDY, params)[0]
            sync()
            seconds[mode] += time.perf_counter() - start
            outs[mode] = seq.output
            if params is not None:
                drafted, accepted = drafted + seq.num_drafted, accepted + seq.num_accepted
        identical &= outs["plain"] == outs["lookup"]
    return {"lookup_speedup_edit_prompts": round(seconds["plain"] / seconds["lookup"], 3),
            "lookup_identical_edit_prompts": identical,
            "lookup_acceptance_edit_prompts": round(accepted / drafted, 3) if drafted else None}


def predicted_speedups(decode_ms: float, verify_ms: dict[int, float]) -> dict[str, float]:
    """What speculation would give at these acceptances with the measured verification
    costs (the best k): the cost side of the goal, separate from how well a random model's
    answers copy its prompt (they do not)."""
    from backends.speculation.cost import expected_tokens

    return {f"{a:.1f}": round(max(expected_tokens(a, k) * decode_ms / t
                                  for k, t in verify_ms.items()), 2)
            for a in (0.5, 0.7, 0.9)}


def random_verification(shape: str, draft_shape: str, steps: int, max_k: int,
                        edit_tokens: int) -> dict:
    import torch

    from backends.cuda.backend import pick_device
    from backends.cuda.engine import GREEDY, Engine, EngineConfig
    from backends.cuda.sequence import Sequence
    from benchmarks.engine import SHAPES, random_model

    device, dtype = pick_device()
    shapes = SHAPES | {"rehearsal": REHEARSAL}
    target_cfg, draft_cfg = shapes[shape], shapes[draft_shape]
    if target_cfg.vocab_size != draft_cfg.vocab_size:
        raise SystemExit(f"{shape} and {draft_shape} have different vocabularies")
    target = random_model(target_cfg, device, dtype)
    draft = random_model(draft_cfg, device, dtype)
    prompt = torch.randint(100, target_cfg.vocab_size - 100, (256,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    budget = steps + 8

    def engine(graphs: bool, adaptive: bool = False) -> Engine:
        e = Engine(target, EngineConfig(context=1024, max_seqs=1, max_tokens=512,
                                        adaptive_speculation=adaptive, cuda_graphs=graphs),
                   device, dtype)
        e.use_draft(draft, Path(f"random-{draft_shape}"))
        return e

    ms = lambda xs: round(1e3 * statistics.median(xs), 3)  # noqa: E731
    plain = ms(step_times(engine(True), Sequence(list(prompt), GREEDY, budget), steps))
    eager = ms(step_times(engine(False), Sequence(list(prompt), GREEDY, budget), steps))
    spec_engines = {True: engine(True), False: engine(False)}
    verify: dict[bool, dict[int, float]] = {True: {}, False: {}}
    for graphs, spec_engine in spec_engines.items():
        for k in range(1, max_k + 1):
            spec = SpeculativeParams(method="draft", draft_model=draft_shape, max_draft=k,
                                     adaptive=False)
            verify[graphs][k] = ms(step_times(spec_engine, Sequence(
                list(prompt), GREEDY, budget * (k + 1), speculative=spec), steps))
    rows = {str(k): {"verify_ms": verify[True][k], "verify_ms_no_graphs": verify[False][k],
                     "x_decode_step": round(verify[True][k] / plain, 2),
                     "x_decode_step_no_graphs": round(verify[False][k] / eager, 2)}
            for k in range(1, max_k + 1)}
    paths = spec_engines[True].runner.paths
    draft_s = spec_engines[True].speculator.draft.step_s
    result = {"target": f"random {shape}", "draft": f"random {draft_shape}",
              "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "dtype": str(dtype).removeprefix("torch."), "prompt_tokens": len(prompt),
              "decode_step_ms": plain, "decode_step_ms_no_graphs": eager,
              "draft_step_ms": round(1e3 * draft_s, 3) if draft_s else None,
              "verification_by_k": rows,
              f"verify_k{max_k}_over_decode_step": rows[str(max_k)]["x_decode_step"],
              f"verify_k{max_k}_over_decode_step_no_graphs":
                  rows[str(max_k)]["x_decode_step_no_graphs"],
              "verify_steps_by_path": dict(paths),
              "verify_graph_bytes": spec_engines[True].runner.verify_graph_bytes,
              "predicted_speedup_by_acceptance": predicted_speedups(plain, verify[True]),
              "note": "random weights: the proposals are rejected, so every step verifies k "
                      "tokens and keeps one; this measures the cost side only"}
    result |= lookup_on_edit_prompts(engine(True, adaptive=True), target_cfg.vocab_size,
                                     edit_tokens)
    result["lookup_note"] = ("lookup's acceptance on a random model is whatever its greedy "
                             "answer repeats (it may loop, or copy nothing), not a real "
                             "model's; predicted_speedup_by_acceptance is what the measured "
                             "verification costs give at a real model's acceptance")
    return result


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
    ap.add_argument("--edit-tokens", type=int, default=64,
                    help="with --random: greedy tokens per edit prompt, lookup against plain")
    ap.add_argument("--rehearse", action="store_true", help="the --random run on a tiny "
                    "shape, 3 steps per k: the GPU run's code path on a CPU, in seconds")
    args = ap.parse_args()
    if args.rehearse:
        args.random, args.draft_shape = "rehearsal", "rehearsal"
        args.steps, args.edit_tokens = 3, 24
    if args.random:
        print(json.dumps(random_verification(args.random, args.draft_shape, args.steps,
                                             args.max_draft, args.edit_tokens), indent=2))
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
