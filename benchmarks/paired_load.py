"""Ember's server against llama.cpp's llama-server, both up at once, requests taking turns:
the paired comparison of issue 19's targets. Prints JSON.

    bash benchmarks/build_llama_server.sh        # prints the llama-server path
    .venv/bin/python benchmarks/paired_load.py --llama-server PATH [--rounds 5]
        [--streams 1,4,8] [--cold 4096]

`serve_load.py` runs one server at a time, a whole round each, so a ratio there compares two
stretches of minutes on a VM whose speed drifts by 4-15% between them. Here both servers stay
up (an idle one takes no CPU) and every measurement is made twice in a row, once per server,
the order alternating: a ratio per pair, then the median of the pairs and their quartiles.

Levels (the same 8 coding prompts and 64-token greedy answers as serve_load, warmed once, so
their prompts are cached in both servers, as in serve_load's later rounds):
- `streams`: the 8 prompts, N at a time: aggregate tokens/s and time to first token (p50).
  At 1 stream also the time per token between the first and last chunk of each answer (the
  decode loop with all of its per-token work) and the time from the first token back to the
  end of the response.
- `cold`: a prompt of about N tokens that shares nothing with anything before it (its first
  line is new each time): time to its first token, i.e. a cold prefill. Then, right after
  it on the same server, the same module with another question (as serve_load's long
  level): time to the first token of a cached prefix, where only the new tail is evaluated.

Tokens are counted by llama-server's /tokenize of each answer's text, so both servers are
counted alike; requests go over a plain socket (one send, TCP_NODELAY), so the client adds
the same few microseconds to both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script
from app.store import Store
from benchmarks.serve_load import (
    PROMPTS,
    free_port,
    long_code,
    running_server,
    server_commands,
)

CONTENT = re.compile(rb'"content":\s*"((?:[^"\\]|\\.)+)"')
SERVERS = ("ember", "llama_server")


@dataclass
class Answer:
    ttft_s: float
    total_s: float
    text: str
    stamps: list[float] = field(default_factory=list)  # when each chunk of text arrived

    @property
    def per_token_s(self) -> float | None:
        if len(self.stamps) < 2:
            return None
        return (self.stamps[-1] - self.stamps[0]) / (len(self.stamps) - 1)


def ask(port: int, model: str, prompt: str, max_tokens: int) -> Answer:
    """One streamed greedy chat request over a plain socket."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "stream": True, "temperature": 0, "max_tokens": max_tokens}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.perf_counter()
        sock.sendall(head + body)
        data, stamps, pieces, scanned = b"", [], [], 0
        while chunk := sock.recv(65536):
            now = time.perf_counter()
            data += chunk
            # only what came since the last whole piece: a piece cut by the read ends
            # without its closing quote, so it is found whole next time
            for m in CONTENT.finditer(data, scanned):
                pieces.append(m.group(1))
                stamps.append(now)
                scanned = m.end()
        end = time.perf_counter()
    if b" 200 " not in data.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"port {port}: {data[:300]!r}")
    text = "".join(json.loads(b'"' + m + b'"') for m in pieces)
    return Answer(ttft_s=(stamps[0] if stamps else end) - started, total_s=end - started,
                  text=text, stamps=stamps)


def level(port: int, model: str, streams: int, max_tokens: int) -> list[Answer]:
    with ThreadPoolExecutor(streams) as pool:
        return list(pool.map(lambda p: ask(port, model, p, max_tokens), PROMPTS))


def summary(pairs: list[tuple[float, float]]) -> dict:
    """Ember's figure over llama-server's, per pair: the median and the quartiles."""
    ratios = sorted(e / s for e, s in pairs)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {"median": round(statistics.median(ratios), 3),
            "q1": round(q[0], 3), "q3": round(q[2], 3), "pairs": len(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--llama-server", default=os.environ.get("EMBER_LLAMA_SERVER"),
                        required=os.environ.get("EMBER_LLAMA_SERVER") is None)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--context", type=int, default=4096, help="tokens per sequence")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", default="1,4,8")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--cold", default="4096",
                        help="prompt lengths of the cold-prefill level, comma-separated "
                             "('' skips it)")
    args = parser.parse_args()
    if not Path(args.llama_server).is_file():
        parser.error(f"--llama-server {args.llama_server}: no such file")
    streams = [int(n) for n in args.streams.split(",") if n.strip()]
    cold = [int(n) for n in args.cold.split(",") if n.strip()]
    args.context = max([args.context, *(n + 1024 for n in cold)])
    args.ember_only = True  # server_commands: no llama-cpp-python server
    model = Store().get(args.model)
    env = {**os.environ, "EMBER_THREADS": str(args.threads),
           "EMBER_CONTEXT": str(args.context)}
    ports = {name: free_port() for name in SERVERS}
    with ExitStack() as stack:
        for name in SERVERS:
            command = server_commands(args, model, ports[name])[name]
            stack.enter_context(running_server(command, env, ports[name], model.id))
        tokenize_url = f"http://127.0.0.1:{ports['llama_server']}/tokenize"

        def tokens(answers: list[Answer]) -> int:
            return sum(len(httpx.post(tokenize_url, json={"content": a.text}, timeout=60)
                           .json()["tokens"]) for a in answers)

        for name in SERVERS:  # every prompt cached in both, as after serve_load's first level
            level(ports[name], model.id, 1, args.max_tokens)
        runs: dict[str, dict[str, list]] = {name: {} for name in SERVERS}
        for r in range(args.rounds):
            for i, n in enumerate(streams):
                order = SERVERS if (r + i) % 2 == 0 else SERVERS[::-1]
                for name in order:
                    started = time.perf_counter()
                    answers = level(ports[name], model.id, n, args.max_tokens)
                    wall = time.perf_counter() - started
                    runs[name].setdefault(f"streams_{n}", []).append((wall, answers))
            for i, n in enumerate(cold):
                order = SERVERS if (r + i) % 2 == 0 else SERVERS[::-1]
                module = f"Round {r}, {time.time_ns()}. Here is my module:\n{long_code(n)}\n"
                for name in order:
                    answer = ask(ports[name], model.id, module + "What does it do?", 8)
                    runs[name].setdefault(f"cold_{n}", []).append(answer.ttft_s)
                    again = ask(ports[name], model.id, module + "Which handler returns 203?", 8)
                    runs[name].setdefault(f"cached_{n}", []).append(again.ttft_s)
            print(json.dumps({"round": r + 1, "of": args.rounds}), file=sys.stderr, flush=True)

        results: dict = {"model": model.id, "threads": args.threads, "rounds": args.rounds,
                         "levels": {}}
        for n in streams:
            key = f"streams_{n}"
            per: dict[str, dict] = {}
            rates: dict[str, list[float]] = {}
            for name in SERVERS:
                rates[name] = [tokens(answers) / wall for wall, answers in runs[name][key]]
                ttfts = [a.ttft_s for _, answers in runs[name][key] for a in answers]
                per[name] = {"aggregate_tokens_per_s": round(statistics.median(rates[name]), 1),
                             "ttft_p50_ms": round(statistics.median(ttfts) * 1000, 1)}
                if n == 1:
                    answers = [a for _, answers in runs[name][key] for a in answers]
                    steps = [a.per_token_s for a in answers if a.per_token_s is not None]
                    per[name]["per_token_ms"] = round(statistics.median(steps) * 1000, 3)
                    per[name]["first_token_to_end_ms"] = round(statistics.median(
                        a.total_s - a.ttft_s for a in answers) * 1000, 1)
            results["levels"][key] = {
                **per,
                "tokens_per_s_ratio": summary(list(zip(rates["ember"], rates["llama_server"],
                                                       strict=True)))}
        for n in cold:
            for key in (f"cold_{n}", f"cached_{n}"):
                results["levels"][key] = {
                    **{name: {"ttft_median_s": round(statistics.median(runs[name][key]), 3)}
                       for name in SERVERS},
                    # time, so below 1 is Ember ahead
                    "ttft_ratio": summary(list(zip(runs["ember"][key],
                                                   runs["llama_server"][key], strict=True)))}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
