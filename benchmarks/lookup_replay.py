"""Prompt lookup's n-gram sizes, compared without timing noise: greedy answers are made once
per model, then decoding with lookup is replayed on them, the shared policy choosing the
draft lengths (backends.speculation), with a modelled step cost (1 + ROW_COST per extra
row). Greedy output is the same with or without speculation, so the replay proposes and
accepts exactly what a real run would, given the same choices. Prints JSON: per n-gram set,
the geometric mean of the modelled speedups by prompt kind, and each against the first set.

    .venv/bin/python benchmarks/lookup_replay.py [--prompts FILE] [--answers FILE]
        [--models qwen2.5-coder-1.5b-instruct,qwen2.5-coder-0.5b-instruct]
        [--sizes "4,3,2 8,6,4,3,2 4,3,2,1"]

`--prompts` takes a set saved by `benchmarks/speculative.py --save-prompts`; `--answers`
keeps the answers (and reuses them when the file exists).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
from pathlib import Path

from app.runtime import Runtime
from app.store import Store
from backends.base import GenerationRequest, Message, SamplingParams, SpeculativeParams
from backends.speculation import ngram
from backends.speculation.cost import StepTimes
from backends.speculation.policy import Speculation

ROW_COST = 0.2  # one more row as a share of a one-row step (llama-bench, 1.5B Q4_K_M, 2 cores)


def benchmark_prompts(path: Path | None) -> list[tuple[str, str, str]]:
    spec = importlib.util.spec_from_file_location(
        "speculative_benchmark", Path(__file__).with_name("speculative.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.read_prompts(path) if path else module.prompts()


def make_answers(models: list[str], prompts: list[tuple[str, str, str]],
                 max_tokens: int) -> list[dict]:
    """Each model's greedy answer to each prompt, with both as tokens."""
    out = []
    with Runtime(store=Store()) as rt:
        for model in models:
            rt.load(model, 4096)
            for name, kind, text in prompts:
                request = GenerationRequest(messages=(Message("user", text),),
                                            sampling=SamplingParams(temperature=0,
                                                                    max_tokens=max_tokens))
                answer, _ = rt.generate(model, request).result()
                out.append({"model": model, "name": name, "kind": kind,
                            "prompt": rt.tokenize(model, text),
                            "answer": rt.tokenize(model, answer)})
    return out


def replay(prompt: list[int], answer: list[int], max_draft: int) -> float:
    """The modelled speedup of prompt lookup over plain decoding on one answer."""
    spec = Speculation.start(SpeculativeParams(method="lookup", max_draft=max_draft), prompt)
    times = StepTimes()
    done, seconds = 0, 0.0
    while done < len(answer):
        spec.remaining = len(answer) - done
        k = spec.choose(len(answer) - done - 1, times)
        proposal = spec.lookup.propose(k) if k > 0 else []
        step = 1.0 + ROW_COST * len(proposal)
        seconds += step
        times.record(1 + len(proposal), step)
        if not proposal:
            spec.decoded_plainly(answer[done])
            spec.lookup.extend(answer[done:done + 1])
            done += 1
            continue
        held = 0
        while held < len(proposal) and done + held < len(answer) \
                and proposal[held] == answer[done + held]:
            held += 1
        got = answer[done:done + held + 1]
        spec.lookup.extend(got)
        done += len(got)
        spec.observe(len(proposal), held)
        spec.realize(len(got), step)
    return len(answer) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=Path, default=None)
    parser.add_argument("--answers", type=Path, default=None)
    parser.add_argument("--models", type=lambda v: v.split(","),
                        default=["qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-draft", type=int, default=8)
    parser.add_argument("--sizes", default="4,3,2 8,6,4,3,2 4,3,2,1 3,2,1",
                        help="n-gram sets to compare, space-separated; the first is the base")
    args = parser.parse_args()
    if args.answers and args.answers.exists():
        answers = json.loads(args.answers.read_text())
    else:
        answers = make_answers(args.models, benchmark_prompts(args.prompts), args.max_tokens)
        if args.answers:
            args.answers.write_text(json.dumps(answers))
    sets = [tuple(int(n) for n in s.split(",")) for s in args.sizes.split()]
    speedups: dict[tuple[int, ...], list[float]] = {}
    for sizes in sets:
        ngram.NGRAM_SIZES = sizes  # the index reads it as it goes
        speedups[sizes] = [replay(a["prompt"], a["answer"], args.max_draft) for a in answers]
    result: dict = {"answers": len(answers), "row_cost": ROW_COST, "sets": {}}
    for sizes in sets:
        row = {}
        for kind in sorted({a["kind"] for a in answers}):
            picked = [i for i, a in enumerate(answers) if a["kind"] == kind]
            mine = [speedups[sizes][i] for i in picked]
            ratios = [speedups[sizes][i] / speedups[sets[0]][i] for i in picked]
            row[kind] = {"geomean_speedup": round(statistics.geometric_mean(mine), 3),
                         "against_first": round(statistics.geometric_mean(ratios), 3),
                         "worst_against_first": round(min(ratios), 3)}
        result["sets"][",".join(map(str, sizes))] = row
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
