"""Where one request's time goes, end to end, on the llama.cpp backend. Prints JSON.

    .venv/bin/python benchmarks/request_profile.py [--model qwen2.5-coder-0.5b-instruct]
        [--prompt-tokens 1000] [--max-tokens 64] [--server] [--llama-server PATH]
    .venv/bin/python benchmarks/request_profile.py --front [--streams 8] [--rounds 15]

In the process (the backend as the worker runs it, timed around its parts): the chat
template, tokenizing, each engine step split into llama_decode and what Ember does around it
(sampling, detokenizing, the output parser, bookkeeping), for a cold prompt of about
`--prompt-tokens` tokens, the next turn of that conversation (cached), and the decode of
`--max-tokens` greedy tokens. With --server, the same request through `ember serve` (the
worker pipe and the HTTP layer on top), and with --llama-server, through llama.cpp's own
server with the same threads: streamed, so the time per token there is what a client sees.
With --front, only the front's work per request at 1 and 8 streams and the time to first
token of a short prompt (front()).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.store import Store  # noqa: E402
from backends.base import GenerationRequest, LoadPlan, Message, SamplingParams  # noqa: E402
from benchmarks.serve_load import (  # noqa: E402
    free_port,
    long_code,
    running_server,
    stream_chat,
)


def conversation(prompt_tokens: int) -> list[dict]:
    return [{"role": "user", "content": f"Here is my module:\n{long_code(prompt_tokens)}\n"
                                        "What does it do?"}]


class Clock:
    """Seconds spent in named parts, and how often each ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    @contextmanager
    def part(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
            self.calls[name] = self.calls.get(name, 0) + 1

    def wrap(self, owner: object, attr: str, name: str) -> None:
        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            with self.part(name):
                return original(*args, **kwargs)

        setattr(owner, attr, timed)


def in_process(model, args: argparse.Namespace) -> dict:
    """The backend in this process: one cold prompt, its cached next turn, and a decode."""
    from llama_cpp._internals import LlamaSampler

    from backends.llamacpp.backend import LlamaCppBackend

    backend = LlamaCppBackend()
    backend.load(model, LoadPlan(context=args.context, threads=args.threads, parallel=8))
    clock = Clock()
    clock.wrap(backend.engine.ctx, "decode", "llama_decode")
    clock.wrap(LlamaSampler, "sample", "sampling")
    clock.wrap(backend.engine, "detokenize", "detokenize")
    results: dict = {}
    try:
        def request(messages: list[dict], max_tokens: int) -> GenerationRequest:
            return GenerationRequest(
                messages=tuple(Message(m["role"], m["content"]) for m in messages),
                sampling=SamplingParams(temperature=0, max_tokens=max_tokens))

        def run(name: str, messages: list[dict], max_tokens: int) -> str:
            clock.seconds.clear()
            clock.calls.clear()
            req = request(messages, max_tokens)
            started = time.perf_counter()
            with clock.part("template"):
                text = backend.render(req.messages, req)
            with clock.part("tokenize"):
                backend._encode(text)
            with clock.part("submit (template, tokenize, grammar, sampler)"):
                backend.submit("s", req)
            first = None
            steps: list[float] = []
            done = None
            while backend.has_work():
                step_started = time.perf_counter()
                with clock.part("engine steps"):
                    events = backend.step()
                steps.append(time.perf_counter() - step_started)
                for _, event in events:
                    if first is None and type(event).__name__ == "TokenEvent":
                        first = time.perf_counter() - started
                    if type(event).__name__ == "DoneEvent":
                        done = event
            total = time.perf_counter() - started
            parts = {k: round(v, 4) for k, v in clock.seconds.items()}
            around = clock.seconds["engine steps"] - clock.seconds.get("llama_decode", 0.0)
            results[name] = {
                "total_s": round(total, 3), "ttft_s": round(first or total, 3),
                "prompt_tokens": done.stats.prompt_tokens,
                "cached_tokens": done.stats.cached_tokens,
                "completion_tokens": done.stats.completion_tokens,
                "engine_steps": len(steps), "parts_s": parts, "calls": dict(clock.calls),
                "engine_python_s": round(around, 4),
                "python_per_step_ms": round(1000 * around / max(1, len(steps)), 3)}
            return done.text

        turn1 = conversation(args.prompt_tokens)
        answer = run("cold_prompt", turn1, args.max_tokens)
        turn2 = [*turn1, {"role": "assistant", "content": answer},
                 {"role": "user", "content": "Rename handler_3 to health_check."}]
        run("cached_turn", turn2, 8)
        run("decode", [{"role": "user", "content": "Write a Python function that checks "
                                                   "whether a number is prime."}],
            args.max_tokens)
        decode = results["decode"]
        steps = decode["calls"]["llama_decode"]
        decode["llama_decode_ms_per_step"] = round(
            1000 * decode["parts_s"]["llama_decode"] / steps, 3)
    finally:
        backend.unload()
    return results


def streamed(url: str, model_id: str, messages: list[dict], max_tokens: int) -> dict:
    """One streamed request: time to first token and the gaps between the chunks after it."""
    result = stream_chat(url, model_id, messages, max_tokens)
    stamps = result["stamps"]
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return {"ttft_s": round(result["ttft_s"], 3) if stamps else None,
            "chunks": len(stamps),
            "ms_per_token_median": round(1000 * statistics.median(gaps), 2) if gaps else None,
            "decode_tokens_per_s": round(len(gaps) / sum(gaps), 1) if gaps else None}


def through_server(command: list[str], env: dict, model_id: str,
                   args: argparse.Namespace, port: int) -> dict:
    with running_server(command, env, port, model_id) as url:
        cold = streamed(url, model_id, conversation(args.prompt_tokens), args.max_tokens)
        decode = [streamed(url, model_id, [{"role": "user", "content": p}], args.max_tokens)
                  for p in ("Write a Python function that checks whether a number is prime.",
                            "Write a Python function that merges two sorted lists.",
                            "Write a Python class for a stack with push, pop and peek.")]
    return {"cold_prompt_ttft_s": cold["ttft_s"],
            "decode_ms_per_token_median": statistics.median(
                d["ms_per_token_median"] for d in decode),
            "decode_tokens_per_s": [d["decode_tokens_per_s"] for d in decode]}


def front(model_ref: str, args: argparse.Namespace) -> dict:
    """The front's work per request: `ember serve`'s app and Runtime in this process (uvicorn
    in a thread, the model in its worker as always), each request's wall time at the client
    less the time its worker's job reports (Stats.total_s: from the job queued in the engine
    to its end), so what is left is HTTP, the routes, the bridge, the Runtime (model lookups,
    checks, prompt counts) and the pipe, not the model's decode. At 1 stream (requests one
    after another) and `--streams` concurrent streams, after warm-up; and the time to first
    token of a short streamed prompt. Medians over `--rounds`."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    import uvicorn

    from app.runtime import Runtime
    from app.server.app import ServerSettings, create_app
    from app.server.metrics import Metrics

    reported: list[float] = []  # each finished job's total_s, as the route records it
    lock = threading.Lock()
    record = Metrics.record

    def recording(self, endpoint, model, stats, seconds) -> None:  # type: ignore[no-untyped-def]
        with lock:
            reported.append(stats.total_s)
        record(self, endpoint, model, stats, seconds)

    Metrics.record = recording  # type: ignore[method-assign]
    runtime = Runtime(parallel=args.streams)
    port = free_port()
    app = create_app(runtime, ServerSettings(port=port, parallel=args.streams))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    counter = iter(range(10**9))

    def one(client: httpx.Client) -> float:
        n = next(counter)
        started = time.perf_counter()
        r = client.post(url + "/v1/chat/completions", timeout=600, json={
            "model": model_ref, "temperature": 0, "max_tokens": args.front_tokens,
            "messages": [{"role": "system", "content": "You answer briefly."},
                         {"role": "user", "content": f"Request {n}: name a prime number."}]})
        r.raise_for_status()
        return time.perf_counter() - started

    def level(streams: int) -> float:
        """Mean front seconds per request of one round of `streams` concurrent requests."""
        with lock:
            reported.clear()
        with ThreadPoolExecutor(streams) as pool, httpx.Client() as client:
            walls = list(pool.map(lambda _: one(client), range(streams)))
        with lock:
            jobs = list(reported)
        assert len(jobs) == streams, (len(jobs), streams)
        return (sum(walls) - sum(jobs)) / streams

    try:
        runtime.load(model_ref, context=args.context)
        for streams in (1, args.streams):  # warm-up: the engine's first batches, the template
            level(streams)
        out: dict = {}
        for streams in (1, args.streams):
            rounds = [level(streams) for _ in range(args.rounds)]
            out[f"front_ms_per_request_{streams}_streams"] = round(
                1000 * statistics.median(rounds), 2)
        ttft = [stream_chat(url, model_ref, [{"role": "user", "content": f"Hi {i}!"}],
                            args.front_tokens)["ttft_s"] for i in range(args.rounds)]
        out["short_prompt_ttft_ms"] = round(1000 * statistics.median(ttft), 2)
        out["rounds"] = args.rounds
    finally:
        server.should_exit = True
        thread.join(30)
        runtime.shutdown()
        Metrics.record = record  # type: ignore[method-assign]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--server", action="store_true", help="also through `ember serve`")
    parser.add_argument("--llama-server", help="also through llama.cpp's llama-server")
    parser.add_argument("--front", action="store_true",
                        help="only the front's work per request (front())")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--front-tokens", type=int, default=4)
    args = parser.parse_args()
    model = Store().get(args.model)
    if args.front:
        print(json.dumps({"model": model.ref, **front(model.ref, args)}, indent=2))
        return
    out: dict = {"model": model.id, "threads": args.threads,
                 "in_process": in_process(model, args)}
    env = {**os.environ, "EMBER_THREADS": str(args.threads),
           "EMBER_CONTEXT": str(args.context)}
    if args.server:
        port = free_port()
        out["ember_serve"] = through_server(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--parallel", "8"],
            env, model.id, args, port)
    if args.llama_server:
        port = free_port()
        out["llama_server"] = through_server(
            [args.llama_server, "--model", str(model.path), "--port", str(port), "--host",
             "127.0.0.1", "--alias", model.id, "--parallel", "8", "--ctx-size",
             str(args.context * 8), "--threads", str(args.threads), "--threads-batch",
             str(args.threads)], env, model.id, args, port)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
