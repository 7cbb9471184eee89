"""Serving under load: Ember's server against llama-cpp-python's own server, same model, same
machine, same run. Prints JSON.

    .venv/bin/python benchmarks/serve_load.py [--model qwen2.5-coder-0.5b-instruct]

Needs llama-cpp-python's server extras for the comparison
(pip install sse-starlette starlette-context pydantic-settings).

Measures, for 1, 4 and 8 concurrent streams of 64-token greedy answers to 8 short coding
prompts: wall-clock aggregate decode tokens/s and time to first token (p50, p99); and the
second turn of a conversation with a ~1,000-token history, with the prompt cache (the same
conversation continued) and without (the same request with its history changed at the
start, so nothing can be reused).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from app.store import Store

PROMPTS = [
    "Write a Python function that reverses a string.",
    "Write a Python function that checks whether a number is prime.",
    "Write a JavaScript function that debounces another function.",
    "Write a SQL query that finds the second highest salary.",
    "Write a Python function that merges two sorted lists.",
    "Write a Bash one-liner that counts lines in all .py files.",
    "Write a Rust function that returns the factorial of n.",
    "Write a Python class for a stack with push, pop and peek.",
]
# Reference figures measured on the 2-core dev machine (issue 4): llama.cpp's llama-server
# with -np 8, 64-token greedy answers, aggregate tokens/s at 1, 4, 8 streams.
LLAMA_SERVER_REFERENCE = {1: 22.3, 4: 48.3, 8: 53.2}
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not start")


def stream_chat(url: str, model: str, messages: list[dict], max_tokens: int = 64) -> dict:
    started = time.perf_counter()
    first = None
    pieces = 0
    text = []
    with httpx.stream("POST", url + "/v1/chat/completions", timeout=600, json={
            "model": model, "messages": messages, "stream": True, "temperature": 0,
            "max_tokens": max_tokens}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            delta = chunk["choices"][0].get("delta", {}).get("content") if chunk.get(
                "choices") else None
            if delta:
                first = first or time.perf_counter()
                pieces += 1
                text.append(delta)
    return {"ttft_s": (first or time.perf_counter()) - started, "text": "".join(text),
            "end": time.perf_counter()}


def load_level(url: str, model: str, streams: int, tokenize) -> dict:  # noqa: ANN001
    """All 8 prompts, `streams` at a time; tokens are counted by re-tokenizing the answers
    with the same tokenizer, so both servers are counted alike."""
    started = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(lambda p: stream_chat(url, model, [
            {"role": "user", "content": p}]), PROMPTS))
    wall = max(r["end"] for r in results) - started
    tokens = sum(len(tokenize(r["text"])) for r in results)
    ttfts = sorted(r["ttft_s"] for r in results)
    return {"streams": streams, "requests": len(results), "completion_tokens": tokens,
            "wall_s": round(wall, 2), "aggregate_tokens_per_s": round(tokens / wall, 1),
            "ttft_p50_s": round(statistics.median(ttfts), 3),
            "ttft_p99_s": round(ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], 3)}


def second_turn(url: str, model: str) -> dict:
    code = "\n".join(f"def handler_{i}(request):\n    return respond(request, {200 + i})"
                     for i in range(55))  # about 1,000 tokens
    turn1 = [{"role": "user", "content": f"Here is my module:\n{code}\nWhat does it do?"}]
    answer = stream_chat(url, model, turn1)["text"]
    turn2 = [*turn1, {"role": "assistant", "content": answer},
             {"role": "user", "content": "Rename handler_3 to health_check."}]
    cached = stream_chat(url, model, turn2, max_tokens=8)["ttft_s"]
    changed = [{"role": "user", "content": "Note: " + turn1[0]["content"]}, *turn2[1:]]
    uncached = stream_chat(url, model, changed, max_tokens=8)["ttft_s"]
    return {"ttft_cached_s": round(cached, 3), "ttft_uncached_s": round(uncached, 3),
            "speedup": round(uncached / cached, 1)}


def run_server(cmd: list[str], url: str, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_ready(url, proc)
    return proc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--ember-only", action="store_true",
                        help="skip llama-cpp-python's server (no comparison)")
    args = parser.parse_args()
    model = Store().get(args.model)
    from app.runtime import Runtime

    with Runtime() as rt:
        rt.load(model.ref, context=2048)

        def tokenize(text: str) -> list[int]:
            return rt.tokenize(model.ref, text)

        results = {}
        env = {**os.environ, "EMBER_THREADS": str(args.threads)}
        port = free_port()
        ember_url = f"http://127.0.0.1:{port}"
        proc = run_server([sys.executable, "-m", "app.cli", "serve", "--port", str(port),
                           "--parallel", "8"], ember_url, env)
        try:
            stream_chat(ember_url, model.id, [{"role": "user", "content": "hi"}], 4)  # load
            results["ember"] = {"levels": [load_level(ember_url, model.id, n, tokenize)
                                           for n in (1, 4, 8)],
                                "second_turn": second_turn(ember_url, model.id)}
            print(json.dumps(results["ember"]), file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(30)
        if args.ember_only:
            print(json.dumps(results, indent=2))
            return
        port = free_port()
        lcp_url = f"http://127.0.0.1:{port}"
        proc = run_server([sys.executable, "-m", "llama_cpp.server", "--model", str(model.path),
                           "--n_ctx", "4096", "--n_threads", str(args.threads), "--port",
                           str(port), "--model_alias", model.id,
                           # by default a new request interrupts the running stream
                           "--interrupt_requests", "False"], lcp_url, env)
        try:
            stream_chat(lcp_url, model.id, [{"role": "user", "content": "hi"}], 4)
            results["llama_cpp_python_server"] = {
                "levels": [load_level(lcp_url, model.id, n, tokenize) for n in (1, 4, 8)]}
        finally:
            proc.terminate()
            proc.wait(30)
    ember = {lv["streams"]: lv["aggregate_tokens_per_s"] for lv in results["ember"]["levels"]}
    lcp = {lv["streams"]: lv["aggregate_tokens_per_s"]
           for lv in results["llama_cpp_python_server"]["levels"]}
    results["ratios"] = {
        "vs_llama_server_reference": {n: round(ember[n] / LLAMA_SERVER_REFERENCE[n], 2)
                                      for n in ember},
        "vs_llama_cpp_python_server": {n: round(ember[n] / lcp[n], 2) for n in ember}}
    results["targets"] = {
        "aggregate_at_4_and_8_vs_llama_server_ge_0.9": all(
            results["ratios"]["vs_llama_server_reference"][n] >= 0.9 for n in (4, 8)),
        "aggregate_at_8_vs_llama_cpp_python_ge_2.2":
            results["ratios"]["vs_llama_cpp_python_server"][8] >= 2.2,
        "second_turn_ttft_speedup_ge_5": results["ember"]["second_turn"]["speedup"] >= 5}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
