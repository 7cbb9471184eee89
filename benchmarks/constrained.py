"""What constrained decoding costs on the llama.cpp backend (backends.grammar, llguidance):
greedy decode tokens/s of one forced tool call with its grammar and with the grammar
switched off (same prompt and request), and the time to first token with 1, 8 and 32 tools
offered, with and without the grammar, on a prompt already in the cache (so the difference
is the grammar's: compiling it and the first mask). Rounds alternate the two modes and
report medians (other jobs share this machine's cores). Beside the wall clock, the grammar's
own CPU time per token (mask, apply, accept) is measured in-process, which noise barely
moves. Prints JSON.

    .venv/bin/python benchmarks/constrained.py [--model qwen2.5-coder-1.5b-instruct]
        [--tokens 64] [--repeat 5]

Targets (issue 17): the grammar costs under 10% of decode speed; 32 tools add under 100 ms
before the first token.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from app.hardware import detect
from app.store import Store
from backends.base import (
    DoneEvent,
    GenerationRequest,
    LoadPlan,
    Message,
    SamplingParams,
    Tool,
    ToolChoice,
)
from backends.grammar import Constraint, vocab_from_llama
from backends.llamacpp.backend import LlamaCppBackend

FORECAST = Tool("get_forecast", "Weather forecast for a city", {
    "type": "object",
    "properties": {
        "city": {"type": "string"}, "country": {"type": "string"},
        "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"},
        "details": {"type": "object", "properties": {
            "wind": {"type": "boolean"}, "humidity": {"type": "boolean"},
            "hours": {"type": "array", "items": {"type": "integer"}}}},
    },
    "required": ["city", "country", "unit", "days", "details"]})
QUESTION = ("What will the weather be in Zürich, Switzerland over the next 5 days, hour by "
            "hour at 6, 9, 12, 15, 18 and 21, with wind and humidity?")


def tools(n: int) -> tuple[Tool, ...]:
    """FORECAST and n - 1 other tools of a few typed parameters each."""
    kinds = ["string", "integer", "number", "boolean"]
    others = tuple(Tool(f"tool_{i}", f"Does task {i}", {
        "type": "object", "properties": {f"p{j}": {"type": kinds[(i + j) % 4]}
                                         for j in range(3)},
        "required": ["p0"]}) for i in range(n - 1))
    return (FORECAST, *others)


NAMED = ToolChoice("function", FORECAST.name)


def request(n_tools: int, tokens: int, choice: ToolChoice = NAMED) -> GenerationRequest:
    """The forecast question with `n_tools` tools offered; a named choice by default (a
    grammar of one tool), `required` for a grammar of every tool."""
    return GenerationRequest(messages=(Message("user", QUESTION),), tools=tools(n_tools),
                             tool_choice=choice,
                             parallel_tool_calls=False,
                             sampling=SamplingParams(temperature=0.0, max_tokens=tokens))


class Switch:
    """The backend's grammar, on or off for the next request; timing every grammar call."""

    def __init__(self, backend: LlamaCppBackend) -> None:
        self.on, self.seconds, self.tokens = True, 0.0, 0
        real = backend._constraint

        def constraint(req, prompt):
            if not self.on:
                return None
            c = real(req, prompt)
            return Timed(c, self) if c is not None else None

        backend._constraint = constraint  # type: ignore[method-assign]


class Timed:
    """A Constraint whose mask and accept time adds up in `switch.seconds`."""

    def __init__(self, inner: Constraint, switch: Switch) -> None:
        self.inner, self.switch = inner, switch

    def mask(self, logits) -> None:
        start = time.process_time()
        self.inner.mask(logits)
        self.switch.seconds += time.process_time() - start

    def accept(self, token: int) -> bool:
        start = time.process_time()
        ok = self.inner.accept(token)
        self.switch.seconds += time.process_time() - start
        self.switch.tokens += 1
        return ok

    def valid_prefix(self, tokens: list[int]) -> int:
        return self.inner.valid_prefix(tokens)


def answer(backend: LlamaCppBackend, req: GenerationRequest) -> DoneEvent:
    done = [e for e in backend.generate(req) if isinstance(e, DoneEvent)]
    if not done:
        raise RuntimeError("no answer")
    return done[0]


def first_event_s(backend: LlamaCppBackend, req: GenerationRequest) -> float:
    """Wall clock from the call to the first event: rendering, tokenizing, compiling the
    grammar and the first token (Stats.ttft_s starts after the grammar is compiled)."""
    start = time.perf_counter()
    events = iter(backend.generate(req))
    next(events)
    took = time.perf_counter() - start
    for _ in events:
        pass
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tools", default="1,8,32")
    ap.add_argument("--parts", default="decode,ttft")
    args = ap.parse_args()
    model = Store().get(args.model)
    hw = detect()
    threads = max(1, hw.physical_cores)
    backend = LlamaCppBackend()
    backend.load(model, LoadPlan(context=8192, threads=threads))
    switch = Switch(backend)
    result: dict = {"model": model.id, "cpu": hw.cpu, "threads": threads,
                    "tokens": args.tokens, "repeat": args.repeat}

    started = time.perf_counter()
    model_vocab = backend._loaded().vocab
    backend._grammar_vocab = vocab_from_llama(model_vocab, backend._loaded().n_vocab())
    result["vocabulary_build_s"] = round(time.perf_counter() - started, 2)  # once per model
    if "decode" in args.parts:
        result["decode"] = decode(backend, switch, args.tokens, args.repeat)
    if "ttft" in args.parts:
        result["ttft_cached_prompt"] = ttft(
            backend, switch, [int(x) for x in args.tools.split(",")], args.repeat)
    result["note"] = ("measured on a shared machine (other jobs on the same cores): compare "
                      "the modes within one run; medians of alternating rounds")
    print(json.dumps(result, indent=2, ensure_ascii=False))


def decode(backend: LlamaCppBackend, switch: Switch, tokens: int, repeat: int) -> dict:
    """Decode speed of the same request, grammar on and off in turn."""
    answer(backend, request(1, 1))  # the prompt into the cache
    rates: dict[str, list[float]] = {"grammar": [], "free": []}
    texts: dict[str, str] = {}
    switch.seconds = switch.tokens = 0
    for _ in range(repeat):
        for mode in ("grammar", "free"):
            switch.on = mode == "grammar"
            done = answer(backend, request(1, tokens))
            rates[mode].append(done.stats.decode_tokens_per_s)
            texts[mode] = done.text
    grammar_s_per_token = switch.seconds / max(switch.tokens, 1)
    free, constrained = statistics.median(rates["free"]), statistics.median(rates["grammar"])
    return {
        "free_tok_s": round(free, 2), "grammar_tok_s": round(constrained, 2),
        "ratio": round(constrained / free, 3) if free else None,
        "rounds": rates,
        "grammar_cpu_ms_per_token": round(grammar_s_per_token * 1e3, 3),
        "grammar_share_of_a_free_step": round(grammar_s_per_token * free, 4),
        "grammar_answer": texts["grammar"], "free_answer": texts["free"]}


def ttft(backend: LlamaCppBackend, switch: Switch, counts: list[int], repeat: int) -> dict:
    """Time to first token with n tools offered and `required` (a grammar of all n), the
    prompt cached: what compiling the grammar and its first mask add."""
    out: dict = {}
    required = ToolChoice("required")
    for n in counts:
        prompt_tokens = answer(backend, request(n, 1, required)).stats.prompt_tokens  # cached
        times: dict[str, list[float]] = {"grammar": [], "free": []}
        for _ in range(repeat):
            for mode in ("grammar", "free"):
                switch.on = mode == "grammar"
                times[mode].append(first_event_s(backend, request(n, 1, required)))
        with_g, without = statistics.median(times["grammar"]), statistics.median(times["free"])
        out[str(n)] = {"prompt_tokens": prompt_tokens,
                        "ttft_grammar_ms": round(with_g * 1e3, 1),
                        "ttft_free_ms": round(without * 1e3, 1),
                        "grammar_adds_ms": round((with_g - without) * 1e3, 1),
                        "grammar_rounds_ms": [round(t * 1e3, 1) for t in times["grammar"]]}
    switch.on = True
    return out


if __name__ == "__main__":
    main()
