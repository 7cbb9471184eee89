"""A coding agent's session against `ember serve` and against llama.cpp's llama-server, one
server at a time, in the same run: time to first token of each request. Prints JSON.

    EMBER_HOME=~/.cache/ember/test-home .venv/bin/python benchmarks/agent_session.py
        [--model qwen2.5-coder-0.5b-instruct] [--prefix-tokens 12000] [--context 16384]
        [--parallel 8] [--max-tokens 32] [--repeat 1] [--other] [--pair] [--rewrite]
        [--llama-server PATH] [--start-with ember|llama_server]

The session (benchmarks/agent_prompts.py) has the shape Claude Code sends: a system prompt
and 12 tool schemas of about --prefix-tokens tokens shared by every request, then 5 requests,
each the one before plus the turns since (a question; a Read call and its result; an answer
and a request for a change; an Edit call and its result; a Bash call and its output). The
assistant turns are scripted, so both servers get the same requests. Each is streamed
(OpenAI /v1/chat/completions, greedy, --max-tokens, the tools offered): the time from sending
it to its first content or tool-call delta, the total time, the prompt, cached and completion
tokens the server reports.

--rewrite then asks for the edited file whole (an agent re-emitting code it was given, where
prompt lookup pays): its decoding speed (completion tokens over the time after the first),
from Ember as it runs by default (prompt lookup on) and with `"speculative": false`, and from
llama-server with its defaults (no speculation).

--other adds a 6th request, a new conversation on the same system prompt and tools: it should
find the prefix cached. --pair then sends two new conversations at once on a prefix nothing
has seen (its first line differs), as Claude Code does on start: each one's time to first
token and the time until both have their first token.

Both servers run with the same model, context per sequence, parallel sequences and threads;
llama-server otherwise with its defaults (its prompt cache, `cache_prompt`, is on by default;
--jinja for the tools). Each starts fresh, is warmed with a short request, runs the session
and stops before the other starts, so they never share the CPU; with --repeat N they take
turns, the order alternating, and each figure is the median (each round also gives the
1-minute load average before and after: on a shared machine, read the ratios with it).
Goals (issue 38): the first request within 1.05x of llama-server's time to first token,
every later one within 1.1x. llama-server: --llama-server, else $EMBER_LLAMA_SERVER, else the
one benchmarks/build_llama_server.sh built (it is run when there is none: about 5 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script: `benchmarks` is not an installed package

from app.store import Store  # noqa: E402
from benchmarks.agent_prompts import (  # noqa: E402
    SETTINGS_PY,
    AgentPrefix,
    agent_prefix,
    other_conversation,
    session_requests,
)
from benchmarks.long_context import (  # noqa: E402
    default_llama_server,
    loaded_context,
    set_flag,
)
from benchmarks.serve_load import free_port, running_server, server_commands  # noqa: E402

FIRST_GOAL, LATER_GOAL = 1.05, 1.10  # time to first token, at most this times llama-server's
SERVERS = ("ember", "llama_server")


@dataclass
class Reply:
    """One streamed answer: seconds from the send to its first content or tool-call delta
    (None: there was none) and to its end; what the server reported of its tokens."""
    ttft_s: float | None
    total_s: float
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    text: str = ""
    tool_calls: int = 0


def read_stream(lines: Iterable[str], started: float, clock: Callable[[], float]) -> Reply:
    """A chat-completions SSE stream's lines, read as they come (`clock()` when each arrives;
    `started`: when the request was sent) -> its Reply. The first delta that carries text,
    reasoning or a tool call is the first token; the usage chunk (stream_options) gives the
    counts, and llama-server's `timings.cache_n` the cached tokens when usage has none."""
    first: float | None = None
    text: list[str] = []
    calls: set[int] = set()
    usage: dict = {}
    timings: dict = {}
    for line in lines:
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        chunk = json.loads(line[5:])
        if "error" in chunk:
            raise RuntimeError(f"the stream ended in an error: {chunk['error']}")
        usage = chunk.get("usage") or usage
        timings = chunk.get("timings") or timings
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            pieces = [delta.get("content"), delta.get("reasoning_content")]
            for tc in delta.get("tool_calls") or []:
                calls.add(tc.get("index", 0))
                pieces.append(json.dumps(tc.get("function") or {}))
            if any(pieces) and first is None:
                first = clock()
            text.extend(p for p in pieces[:2] if p)
    end = clock()
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return Reply(ttft_s=None if first is None else first - started, total_s=end - started,
                 prompt_tokens=usage.get("prompt_tokens"),
                 cached_tokens=cached if cached is not None else timings.get("cache_n"),
                 completion_tokens=usage.get("completion_tokens"), text="".join(text),
                 tool_calls=len(calls))


def ask(url: str, model: str, messages: list[dict], tools: list[dict],
        max_tokens: int, extra: dict | None = None) -> Reply:
    """One streamed greedy chat request with the tools offered."""
    body = {"model": model, "messages": messages, "tools": tools, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0,
            "max_tokens": max_tokens, **(extra or {})}
    started = time.perf_counter()
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=1800) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: {r.status_code} {r.read().decode()[:300]}")
        return read_stream(r.iter_lines(), started, time.perf_counter)


def rounded(reply: Reply) -> dict:
    out = asdict(reply)
    out["ttft_s"] = None if reply.ttft_s is None else round(reply.ttft_s, 3)
    out["total_s"] = round(reply.total_s, 3)
    out["text"] = reply.text[:80]
    return out


def decode_rate(reply: Reply) -> float | None:
    """Completion tokens per second after the first (None: too few to tell)."""
    if reply.ttft_s is None or not reply.completion_tokens or reply.completion_tokens < 2:
        return None
    return round((reply.completion_tokens - 1) / max(reply.total_s - reply.ttft_s, 1e-6), 2)


REWRITE_VARIANTS = {"ember": {"default": None, "speculation_off": {"speculative": False}},
                    "llama_server": {"default": None}}


def run_session(url: str, model: str, prefix: AgentPrefix, pair_prefix: AgentPrefix | None,
                args: argparse.Namespace, server: str = "ember") -> dict:
    """The session's requests in order, then the rewrite, the other conversation and the
    pair if asked."""
    def one(messages: list[dict], tools: list[dict], max_tokens: int = args.max_tokens,
            extra: dict | None = None) -> dict:
        got = ask(url, model, messages, tools, max_tokens, extra)
        reply = rounded(got) | {"decode_tok_s": decode_rate(got)}
        print(json.dumps(reply), file=sys.stderr, flush=True)
        return reply

    load_before = os.getloadavg()[0]  # a shared machine: how busy it was, for the reader
    session = session_requests(prefix)
    out: dict = {"session": [one(m, prefix.tools) for m in session]}
    if args.rewrite:
        messages = rewrite_request(session[-1])
        out["rewrite"] = {variant: one(messages, prefix.tools, args.rewrite_tokens, extra)
                          for variant, extra in REWRITE_VARIANTS[server].items()}
    if args.other:
        out["other_conversation"] = one(other_conversation(
            prefix, "List the Python files under src/ that import requests."), prefix.tools)
    if pair_prefix is not None:
        questions = ("Summarise what this repository does.", "Write a one-line title for "
                                                              "this session.")
        started = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(lambda q: ask(url, model, other_conversation(
                pair_prefix, q), pair_prefix.tools, args.max_tokens), questions))
        firsts = [r.ttft_s for r in replies if r.ttft_s is not None]
        out["pair"] = {"replies": [rounded(r) for r in replies],
                       "both_first_tokens_s": round(max(firsts), 3) if len(firsts) == 2
                       else None, "wall_s": round(time.perf_counter() - started, 3)}
    out["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return out


def rewrite_request(messages: list[dict]) -> list[dict]:
    """The session so far, then the ask to write the edited file out whole (given again,
    without the Read tool's line numbers)."""
    return [*messages, {"role": "assistant", "content": "The test expects the old port."},
            {"role": "user", "content": "Here is config/settings.py:\n```python\n"
             f"{SETTINGS_PY}```\nDo not call any tool. Output the whole file again, every "
             "line, with the default PORT changed to 9000 and WORKERS to 8, in one python "
             "code block, nothing else."}]


def medians(rounds: list[dict]) -> dict:
    """One server's rounds -> the median time to first token of each request."""
    def med(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(statistics.median(known), 3) if known else None

    out: dict = {"session_ttft_s": [med([r["session"][i]["ttft_s"] for r in rounds])
                                    for i in range(len(rounds[0]["session"]))]}
    if "other_conversation" in rounds[0]:
        out["other_conversation_ttft_s"] = med([r["other_conversation"]["ttft_s"]
                                                for r in rounds])
    if "rewrite" in rounds[0]:
        out["rewrite_decode_tok_s"] = {v: med([r["rewrite"][v]["decode_tok_s"] for r in rounds])
                                       for v in rounds[0]["rewrite"]}
    if "pair" in rounds[0]:
        out["pair_both_first_tokens_s"] = med([r["pair"]["both_first_tokens_s"]
                                               for r in rounds])
    return out


def ratio(ours: float | None, theirs: float | None) -> float | None:
    return None if ours is None or not theirs else round(ours / theirs, 3)


def compare(ember: dict, llama: dict) -> tuple[dict, dict]:
    """Ember's medians over llama-server's (time: below 1 is Ember ahead), and the goals."""
    per_request = [ratio(e, s) for e, s in zip(ember["session_ttft_s"],
                                               llama["session_ttft_s"], strict=True)]
    ratios: dict = {"session_ttft": per_request}
    for key in ("other_conversation_ttft_s", "pair_both_first_tokens_s"):
        if key in ember:
            ratios[key.removesuffix("_s")] = ratio(ember[key], llama[key])
    if "rewrite_decode_tok_s" in ember:  # speed: above 1 is Ember ahead
        ours, theirs = ember["rewrite_decode_tok_s"], llama["rewrite_decode_tok_s"]
        ratios["rewrite_decode_vs_llama_server"] = ratio(ours["default"], theirs["default"])
        ratios["rewrite_decode_lookup_vs_off"] = ratio(ours["default"],
                                                        ours["speculation_off"])
    later = per_request[1:]
    goals = {f"first_le_{FIRST_GOAL}x": per_request[0] is not None
             and per_request[0] <= FIRST_GOAL,
             f"later_le_{LATER_GOAL}x": all(r is not None and r <= LATER_GOAL for r in later)}
    return ratios, goals


def llama_server_path(given: str | None) -> str:
    """The llama-server to compare with; built by build_llama_server.sh when there is none."""
    path = given or default_llama_server()
    if path is None:
        print("agent_session: no llama-server yet, building it (about 5 minutes)",
              file=sys.stderr)
        path = subprocess.run(["bash", str(REPO / "benchmarks/build_llama_server.sh")],
                              check=True, capture_output=True, text=True).stdout.strip()
    if not Path(path).is_file():
        raise SystemExit(f"agent_session: llama-server {path}: no such file")
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--prefix-tokens", type=int, default=12000,
                        help="system prompt and tool schemas, in tokens")
    parser.add_argument("--context", type=int, default=16384, help="tokens per sequence")
    parser.add_argument("--parallel", type=int, default=8, help="sequences, in both servers")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--other", action="store_true",
                        help="a 6th request: another conversation on the same prefix")
    parser.add_argument("--pair", action="store_true",
                        help="then two conversations at once on a new prefix")
    parser.add_argument("--rewrite", action="store_true",
                        help="then ask for the edited file whole: decoding speed with and "
                             "without prompt lookup")
    parser.add_argument("--rewrite-tokens", type=int, default=320)
    parser.add_argument("--llama-server", default=None)
    parser.add_argument("--start-with", choices=SERVERS, default="ember",
                        help="the server of the first round (the order alternates after)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")
    if args.prefix_tokens + 2000 > args.context:
        parser.error(f"--context {args.context} leaves no room for the session after a "
                     f"{args.prefix_tokens}-token prefix: give at least "
                     f"{args.prefix_tokens + 2000}")
    model = Store().get(args.model)
    args.llama_server, args.ember_only = llama_server_path(args.llama_server), True

    from backends.cuda.tokenizer import GGUFTokenizer  # llama.cpp's vocabulary, no weights
    vocab = GGUFTokenizer(model.path)
    try:
        def count(text: str) -> int:
            return len(vocab.tokenize(text))

        prefix = agent_prefix(args.prefix_tokens, count)
        pair = agent_prefix(args.prefix_tokens, count, "Session 2.\n") if args.pair else None
    finally:
        vocab.close()

    env = {**os.environ, "EMBER_THREADS": str(args.threads),
           "EMBER_CONTEXT": str(args.context)}
    rounds: dict[str, list[dict]] = {name: [] for name in SERVERS}
    contexts: list[int | None] = []
    for r in range(args.repeat):
        port = free_port()
        commands = server_commands(args, model, port)
        commands["ember"] = set_flag(commands["ember"], "--parallel", str(args.parallel))
        commands["llama_server"] = [*set_flag(set_flag(
            commands["llama_server"], "--parallel", str(args.parallel)),
            "--ctx-size", str(args.context * args.parallel)), "--jinja"]
        first = SERVERS if args.start_with == "ember" else SERVERS[::-1]
        for name in first if r % 2 == 0 else first[::-1]:
            print(f"agent_session: round {r + 1}, {name}", file=sys.stderr, flush=True)
            with running_server(commands[name], env, port, model.id) as url:
                if name == "ember":
                    contexts.append(loaded_context(url))
                rounds[name].append(run_session(url, model.id, prefix, pair, args, name))

    results: dict = {
        "model": model.id, "threads": args.threads, "context": args.context,
        "parallel": args.parallel, "max_tokens": args.max_tokens, "repeat": args.repeat,
        "prefix_tokens": prefix.tokens, "llama_server_binary": args.llama_server,
        "ember_loaded_context": contexts[0] if contexts else None,
        **{name: medians(rs) | {"rounds": rs} for name, rs in rounds.items()}}
    results["ratios"], results["goals"] = compare(results["ember"], results["llama_server"])
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
