"""Speculative decoding: tokens/s without and with it, on code-writing and code-editing
prompts, greedy, through the Runtime (a worker process, as the app and server run it).
Prints JSON.

    .venv/bin/python benchmarks/speculative.py [--target qwen2.5-coder-1.5b-instruct]
        [--draft qwen2.5-coder-0.5b-instruct] [--backend llamacpp] [--max-tokens 128]
        [--repeat 3] [--modes lookup,draft] [--prompts FILE] [--save-prompts FILE]

For each prompt: decode tokens/s plain, with prompt lookup and with the draft model (the
time after the first token, so the prompt cache that later runs of the same prompt hit does
not count; the draft model's own prompt evaluation does), the speedups, acceptance rates, and
whether each answer equals the plain one. With --repeat N every prompt runs N times in each
mode, the modes interleaved, and a prompt's tokens/s is the median of its runs (one run on
this 2-core machine varies by up to 30%). A prompt's paired speedup is the median of each
run's tokens/s over the plain run just before it, which the machine's drift moves less than
the ratio of the two medians. The summary gives medians and minimums of both per kind.
Run it on a quiet machine: other processes on the cores change all three numbers.

The editing prompts are cut from Ember's own source files, so they change as the code does.
To compare two commits, save one prompt set (`--save-prompts FILE`) and run both on it
(`--prompts FILE`).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from app.hardware import detect
from app.runtime import Runtime
from app.store import Store
from backends.base import GenerationRequest, Message, SamplingParams, SpeculativeParams

REPO = Path(__file__).resolve().parent.parent


def _code(path: str, start: int, lines: int) -> str:
    text = (REPO / path).read_text().splitlines()
    return "\n".join(text[start:start + lines])


def prompts() -> list[tuple[str, str, str]]:
    """(name, kind, text): code to write from scratch, and code to edit (the answer copies
    most of its prompt)."""
    text_py = _code("backends/text.py", 0, 60)
    prompt_py = _code("backends/prompt.py", 10, 35)
    lookup_py = _code("backends/speculation/ngram.py", 20, 36)  # class NgramIndex
    return [
        ("lru-cache", "write", "Write a Python class implementing an LRU cache with get and "
                               "put, using OrderedDict. Only code."),
        ("parse-csv", "write", "Write a Python function that parses a CSV line with quoted "
                               "fields (commas and escaped quotes inside quotes). Only code."),
        ("binary-search", "write", "Implement binary search over a sorted list in Python, "
                                   "iteratively, with a docstring and three asserts."),
        ("rename", "edit", "Rename the function held_back to trailing_stop_prefix everywhere "
                           f"in this code and output the whole file:\n```python\n{text_py}\n```"),
        ("type-hints", "edit", "Add a comment line above every `if` in this function and "
                               f"output the whole function:\n```python\n{prompt_py}\n```"),
        ("docstring", "edit", "Replace the docstrings in this class with one-line docstrings "
                              f"and output the whole class:\n```python\n{lookup_py}\n```"),
    ]


def read_prompts(path: Path) -> list[tuple[str, str, str]]:
    """A prompt set saved by --save-prompts: a JSON list of {name, kind, text}."""
    return [(p["name"], p["kind"], p["text"]) for p in json.loads(path.read_text())]


def save_prompts(path: Path) -> None:
    path.write_text(json.dumps([{"name": n, "kind": k, "text": t} for n, k, t in prompts()],
                               indent=1) + "\n")


def run(args: argparse.Namespace) -> dict:
    greedy = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    known = {"lookup": SpeculativeParams(method="lookup", max_draft=args.max_draft),
             "draft": SpeculativeParams(method="draft", draft_model=args.draft,
                                        max_draft=args.max_draft)}
    modes: dict[str, SpeculativeParams | None] = {"plain": None}
    modes.update((m, known[m]) for m in args.modes)
    rows = []
    with Runtime(store=Store(), backend=args.backend) as rt:
        loaded = rt.load(args.target, args.context)
        for name, kind, text in (read_prompts(args.prompts) if args.prompts else prompts()):
            row: dict = {"prompt": name, "kind": kind}
            answers: dict[str, list[str]] = {mode: [] for mode in modes}
            speeds: dict[str, list[float]] = {mode: [] for mode in modes}
            for _ in range(args.repeat):
                for mode, spec in modes.items():
                    request = GenerationRequest(messages=(Message("user", text),),
                                                sampling=greedy, speculative=spec)
                    answer, stats = rt.generate(args.target, request).result()
                    speeds[mode].append(stats.decode_tokens_per_s)
                    answers[mode].append(answer)
                    row[f"{mode}_tokens"] = stats.completion_tokens
                    if spec is not None:  # summed over the runs
                        row[f"{mode}_proposed"] = (row.get(f"{mode}_proposed", 0)
                                                   + stats.draft_tokens)
                        row[f"{mode}_accepted"] = (row.get(f"{mode}_accepted", 0)
                                                   + stats.accepted_tokens)
            for mode in modes:
                if mode != "plain":  # every run of the mode against the first plain run
                    row[f"{mode}_identical"] = all(a == answers["plain"][0]
                                                   for a in answers[mode])
            for mode in modes:
                row[f"{mode}_tokens_per_s"] = round(statistics.median(speeds[mode]), 2)
                if len(speeds[mode]) > 1:
                    row[f"{mode}_runs_tokens_per_s"] = speeds[mode]
                if mode != "plain":
                    row[f"{mode}_speedup"] = round(
                        row[f"{mode}_tokens_per_s"] / row["plain_tokens_per_s"], 3)
                    # each run against the plain run just before it: the machine's speed
                    # drifts less between neighbours than across a prompt's runs
                    row[f"{mode}_paired_speedup"] = round(statistics.median(
                        s / p for s, p in zip(speeds[mode], speeds["plain"], strict=True)), 3)
            rows.append(row)
            if args.verbose:
                print(json.dumps(row), flush=True)

    def summary(mode: str, kind: str | None) -> dict:
        picked = [r for r in rows if kind is None or r["kind"] == kind]
        speedups = [r[f"{mode}_speedup"] for r in picked]
        paired = [r[f"{mode}_paired_speedup"] for r in picked]
        return {"median_speedup": round(statistics.median(speedups), 3),
                "min_speedup": round(min(speedups), 3),
                "median_paired_speedup": round(statistics.median(paired), 3),
                "min_paired_speedup": round(min(paired), 3),
                "acceptance": round(sum(r[f"{mode}_accepted"] for r in picked)
                                    / max(1, sum(r[f"{mode}_proposed"] for r in picked)), 3),
                "all_identical": all(r[f"{mode}_identical"] for r in picked)}

    hw = detect()
    return {
        "benchmark": "speculative",
        "machine": f"{hw.cpu}, {hw.physical_cores} cores, "
                   f"{', '.join(g.name for g in hw.gpus) or 'no GPU'}",
        "backend": loaded.backend, "target": args.target, "draft": args.draft,
        "threads": loaded.plan.threads, "max_tokens": args.max_tokens,
        "max_draft": args.max_draft, "repeat": args.repeat,
        "summary": {f"{mode}_{kind or 'all'}": summary(mode, kind)
                    for mode in args.modes for kind in ("edit", "write", None)},
        "prompts": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--backend", default=None, help="default: chosen for this machine")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-draft", type=int, default=8)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per prompt and mode; tokens/s is their median")
    parser.add_argument("--modes", type=lambda v: v.split(","), default=["lookup", "draft"],
                        help="speculative modes to compare with plain decoding "
                             "(comma-separated: lookup, draft)")
    parser.add_argument("--verbose", action="store_true", help="print each prompt's row too")
    parser.add_argument("--prompts", type=Path, default=None,
                        help="run the prompt set in this file (from --save-prompts) instead of "
                             "the built-in one")
    parser.add_argument("--save-prompts", type=Path, default=None, metavar="FILE",
                        help="write the built-in prompt set to FILE and exit")
    args = parser.parse_args()
    if args.save_prompts:
        save_prompts(args.save_prompts)
        return
    unknown = set(args.modes) - {"lookup", "draft"}
    if unknown or not args.modes:
        parser.error(f"--modes takes lookup and/or draft, not {','.join(args.modes)!r}")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
