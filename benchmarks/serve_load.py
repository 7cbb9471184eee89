"""Serving under load: Ember's server against llama-cpp-python's own server, same model, same
machine, same run. Prints JSON.

    .venv/bin/python benchmarks/serve_load.py [--model qwen2.5-coder-0.5b-instruct]
        [--llama-server PATH/TO/llama-server] [--repeat 3] [--long 4096,16384]

`bash benchmarks/build_llama_server.sh` builds llama-server from the llama.cpp that
llama-cpp-python vendors, with Ember's flags, and prints its path. With --llama-server,
llama.cpp's own server (`-np 8`, the same threads and context per sequence) runs the same load
in the same run, and the ratios are against it; without, against the figures the issue
measured on this machine (LLAMA_SERVER_REFERENCE), which a busier or slower day cannot be
compared with fairly. llama-cpp-python's own server runs too when its extras are installed
(pip install sse-starlette starlette-context pydantic-settings); without them it is skipped,
with a note in the output. With --repeat N the servers take turns, N rounds, and each level
reports its median.

Measures, for 1, 4 and 8 concurrent streams of 64-token greedy answers to 8 short coding
prompts: wall-clock aggregate decode tokens/s and time to first token (p50, p99); and the
second turn of a conversation with a ~1,000-token history, with the prompt cache (the same
conversation continued) and without (the same request with its history changed at the
start, so nothing can be reused). The long-prompt level (--long; `--long ""` skips it)
starts each server again with room for the longest prompt and sends a module of that many
tokens: time to first token cold, then with the module cached and another question after it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
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
STREAMS = (1, 4, 8)
PARALLEL = 8  # sequences decoded together, in Ember and in llama-server
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
    """One streamed greedy request: its time to first token, text, end, and the time each
    chunk of text arrived (`stamps`)."""
    started = time.perf_counter()
    stamps: list[float] = []
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
                stamps.append(time.perf_counter())
                text.append(delta)
    end = time.perf_counter()
    return {"ttft_s": (stamps[0] if stamps else end) - started, "text": "".join(text),
            "end": end, "stamps": stamps}


def load_level(url: str, model: str, streams: int, tokenize) -> dict:
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


def long_code(tokens: int) -> str:
    """Python source of about `tokens` tokens (Qwen's tokenizer: about 18 a function)."""
    return "\n".join(f"def handler_{i}(request):\n    return respond(request, {200 + i})"
                     for i in range(max(1, tokens // 18)))


def second_turn(url: str, model: str) -> dict:
    code = long_code(1000)
    turn1 = [{"role": "user", "content": f"Here is my module:\n{code}\nWhat does it do?"}]
    answer = stream_chat(url, model, turn1)["text"]
    turn2 = [*turn1, {"role": "assistant", "content": answer},
             {"role": "user", "content": "Rename handler_3 to health_check."}]
    cached = stream_chat(url, model, turn2, max_tokens=8)["ttft_s"]
    changed = [{"role": "user", "content": "Note: " + turn1[0]["content"]}, *turn2[1:]]
    uncached = stream_chat(url, model, changed, max_tokens=8)["ttft_s"]
    return {"ttft_cached_s": round(cached, 3), "ttft_uncached_s": round(uncached, 3),
            "speedup": round(uncached / cached, 1)}


def long_prompt(url: str, model: str, tokens: int) -> dict:
    """A module of about `tokens` tokens: time to first token cold, and cached (the module
    again, another question after it)."""
    module = f"Here is my module:\n{long_code(tokens)}\n"
    cold = stream_chat(url, model, [{"role": "user", "content": module + "What does it do?"}],
                       max_tokens=8)["ttft_s"]
    cached = stream_chat(url, model, [{"role": "user", "content": module + "Which handler "
                                       "returns 203?"}], max_tokens=8)["ttft_s"]
    return {"tokens": tokens, "ttft_cold_s": round(cold, 3), "ttft_cached_s": round(cached, 3)}


@contextmanager
def running_server(command: list[str], env: dict, port: int, model_id: str) -> Iterator[str]:
    """A server under test on `port`, ready and with its model loaded (one short request);
    yields its URL, and stops it afterwards."""
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, proc)
        stream_chat(url, model_id, [{"role": "user", "content": "hi"}], 4)  # load
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


LCP_SERVER_EXTRAS = ("sse_starlette", "starlette_context", "pydantic_settings")


def missing_lcp_extras() -> list[str]:
    """The modules llama-cpp-python's server needs that are not installed."""
    return [m for m in LCP_SERVER_EXTRAS if importlib.util.find_spec(m) is None]


def server_commands(args: argparse.Namespace, model, port: int,
                    context: int | None = None) -> dict[str, list[str]]:
    """How to start each server under test on `port`, by name (`context`: tokens per
    sequence, in Ember's environment; llama-server's is given here)."""
    context = context or args.context
    commands = {"ember": [sys.executable, "-m", "app.cli", "serve", "--port", str(port),
                          "--parallel", str(PARALLEL)]}
    if args.llama_server:
        commands["llama_server"] = [
            args.llama_server, "--model", str(model.path), "--port", str(port),
            "--host", "127.0.0.1", "--alias", model.id, "--parallel", str(PARALLEL),
            "--ctx-size", str(context * PARALLEL), "--threads", str(args.threads),
            "--threads-batch", str(args.threads)]
    if not args.ember_only and not missing_lcp_extras():
        commands["llama_cpp_python_server"] = [
            sys.executable, "-m", "llama_cpp.server", "--model", str(model.path),
            "--n_ctx", str(args.context), "--n_threads", str(args.threads), "--port",
            str(port), "--model_alias", model.id,
            # by default a new request interrupts the running stream
            "--interrupt_requests", "False"]
    return commands


def measure_long(name: str, command: list[str], env: dict, model, port: int,
                 lengths: list[int]) -> list[dict]:
    with running_server(command, env, port, model.id) as url:
        result = [long_prompt(url, model.id, n) for n in lengths]
    print(json.dumps({name: {"long": result}}), file=sys.stderr)
    return result


def measure(name: str, command: list[str], env: dict, model, tokenize,
            port: int) -> dict:
    with running_server(command, env, port, model.id) as url:
        result = {"levels": [load_level(url, model.id, n, tokenize) for n in STREAMS]}
        if name != "llama_cpp_python_server":  # it has no prompt cache across requests
            result["second_turn"] = second_turn(url, model.id)
    print(json.dumps({name: result}), file=sys.stderr)
    return result


def median_levels(rounds: list[dict]) -> dict:
    """One server's rounds -> each level's median aggregate tokens/s (with every round's)."""
    out = {"levels": []}
    for i, n in enumerate(STREAMS):
        runs = [r["levels"][i]["aggregate_tokens_per_s"] for r in rounds]
        ttft = [r["levels"][i]["ttft_p50_s"] for r in rounds]
        out["levels"].append({"streams": n, "aggregate_tokens_per_s": statistics.median(runs),
                              "runs_tokens_per_s": runs,
                              "ttft_p50_s": statistics.median(ttft)})
    if "second_turn" in rounds[0]:
        out["second_turn"] = {key: statistics.median(r["second_turn"][key] for r in rounds)
                              for key in rounds[0]["second_turn"]}
    if "long" in rounds[0]:
        out["long"] = [{key: statistics.median(r["long"][i][key] for r in rounds)
                        for key in level} for i, level in enumerate(rounds[0]["long"])]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--context", type=int, default=4096, help="tokens per sequence")
    parser.add_argument("--llama-server", default=os.environ.get("EMBER_LLAMA_SERVER"),
                        help="llama.cpp's llama-server binary, to compare in the same run")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds; the servers take turns and each level reports its median")
    parser.add_argument("--ember-only", action="store_true",
                        help="skip llama-cpp-python's server")
    parser.add_argument("--long", default="4096,16384",
                        help="prompt lengths of the long-prompt level, comma-separated")
    args = parser.parse_args()
    lengths = [int(n) for n in args.long.split(",") if n.strip()]
    if args.llama_server and not Path(args.llama_server).is_file():
        parser.error(f"--llama-server {args.llama_server}: no such file")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")
    model = Store().get(args.model)
    from app.runtime import Runtime

    with Runtime() as rt:
        rt.load(model.ref, context=2048)

        def tokenize(text: str) -> list[int]:
            return rt.tokenize(model.ref, text)

        env = {**os.environ, "EMBER_THREADS": str(args.threads),
               "EMBER_CONTEXT": str(args.context)}
        rounds: dict[str, list[dict]] = {}
        long_context = max(lengths, default=0) + 1024
        for _ in range(args.repeat):
            port = free_port()
            for name, command in server_commands(args, model, port).items():
                try:
                    result = measure(name, command, env, model, tokenize, port)
                except RuntimeError as e:  # a server that cannot start is noted, not fatal
                    if name == "ember":
                        raise
                    print(json.dumps({name: {"skipped": str(e)}}), file=sys.stderr)
                    continue
                rounds.setdefault(name, []).append(result)
            if lengths:
                long_env = {**env, "EMBER_CONTEXT": str(long_context)}
                for name, command in server_commands(args, model, port, long_context).items():
                    if name in rounds and name != "llama_cpp_python_server":  # it has no
                        # prompt cache across requests
                        rounds[name][-1]["long"] = measure_long(name, command, long_env,
                                                                model, port, lengths)
    results: dict = {"model": model.id, "threads": args.threads, "repeat": args.repeat,
                     **{name: median_levels(r) for name, r in rounds.items()}}
    if not args.ember_only and missing_lcp_extras():
        results["llama_cpp_python_server"] = {
            "skipped": "its extras are not installed: " + ", ".join(missing_lcp_extras())}
    ember = {lv["streams"]: lv["aggregate_tokens_per_s"] for lv in results["ember"]["levels"]}
    ratios = results["ratios"] = {}
    if "llama_server" in results:
        base = {lv["streams"]: lv["aggregate_tokens_per_s"]
                for lv in results["llama_server"]["levels"]}
        ratios["vs_llama_server"] = {n: round(ember[n] / base[n], 2) for n in ember}
    else:
        ratios["vs_llama_server"] = {n: round(ember[n] / LLAMA_SERVER_REFERENCE[n], 2)
                                     for n in ember}
        ratios["llama_server_figures"] = "the issue's reference, not measured in this run"
    targets = results["targets"] = {
        "second_turn_ttft_speedup_ge_5": results["ember"]["second_turn"]["speedup"] >= 5}
    if "llama_server" in results:
        targets.update(llama_server_targets(results, ratios))
    if "levels" in results.get("llama_cpp_python_server", {}):
        lcp = {lv["streams"]: lv["aggregate_tokens_per_s"]
               for lv in results["llama_cpp_python_server"]["levels"]}
        ratios["vs_llama_cpp_python_server"] = {n: round(ember[n] / lcp[n], 2) for n in ember}
        targets["aggregate_at_8_vs_llama_cpp_python_ge_2.2"] = \
            ratios["vs_llama_cpp_python_server"][8] >= 2.2
    print(json.dumps(results, indent=2))


def llama_server_targets(results: dict, ratios: dict) -> dict:
    """Issue 19's targets, as ratios to llama-server in the same run: aggregate tokens/s at
    least 1.0x at every level, and every time to first token at most 1.0x."""
    ember, base = results["ember"], results["llama_server"]
    ttft = ratios["ttft_vs_llama_server"] = {
        "second_turn_cached": round(ember["second_turn"]["ttft_cached_s"]
                                    / base["second_turn"]["ttft_cached_s"], 2),
        "second_turn_uncached": round(ember["second_turn"]["ttft_uncached_s"]
                                      / base["second_turn"]["ttft_uncached_s"], 2)}
    for ours, theirs in zip(ember.get("long", []), base.get("long", []), strict=True):
        for kind in ("cold", "cached"):
            ttft[f"long_{ours['tokens']}_{kind}"] = round(
                ours[f"ttft_{kind}_s"] / theirs[f"ttft_{kind}_s"], 2)
    return {"aggregate_vs_llama_server_ge_1.0": all(
                r >= 1.0 for r in ratios["vs_llama_server"].values()),
            "ttft_vs_llama_server_le_1.0": all(r <= 1.0 for r in ttft.values())}


if __name__ == "__main__":
    main()
