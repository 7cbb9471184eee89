"""A conversation's next turn after a restart, with and without its saved KV cache. Prints JSON.

    .venv/bin/python benchmarks/resume.py [--model qwen2.5-coder-0.5b-instruct]
        [--history 1000,4000] [--threads N] [--rounds 3] [--llama-server PATH]

For each length of history (tokens of a first turn: a module to review and a question), the
time to first token of the next turn (medians of `--rounds`, each with its own follow-up
question so that none repeats a prompt the engine holds whole):

- `warm`: the backend that answered the first turn, its cache in its slot;
- `restored`: a new backend with the same plan after the first one saved its caches (what
  `unload` does at a worker's stop, a server's stop or the app's quit), each round from a
  fresh copy of the saved folder;
- `cold`: a new backend with no saved caches: the whole prompt again.

In process, on the llama.cpp backend as the worker runs it: a restart of `ember serve` adds
the worker's start and the model's load (reported as `load_s`), which come before the first
request either way. Add 16000 to --history for the issue's third length (minutes on 2 cores).
With --llama-server (bash benchmarks/build_llama_server.sh builds one), each length also gets
llama-server's rows on the same file: warm, after its own restart (cold), and after a restart
with its manual slot save and restore (`slot_restored`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.store import Store  # noqa: E402
from backends.base import (  # noqa: E402
    DoneEvent,
    GenerationRequest,
    LoadPlan,
    Message,
    SamplingParams,
)
from backends.llamacpp.backend import LlamaCppBackend  # noqa: E402
from benchmarks.serve_load import free_port, long_code, stream_chat, wait_ready  # noqa: E402

FOLLOW_UPS = ("Which handler returns 250?", "Name the first handler.", "How many handlers?",
              "What does handler_3 return?", "Is any handler async?")


def ask(backend: LlamaCppBackend, messages: tuple[Message, ...],
        max_tokens: int = 8) -> DoneEvent:
    request = GenerationRequest(messages=messages,
                                sampling=SamplingParams(temperature=0, max_tokens=max_tokens))
    done = list(backend.generate(request))[-1]
    if not isinstance(done, DoneEvent):
        raise RuntimeError(f"the request failed: {done}")
    return done


def loaded(model: object, plan: LoadPlan) -> tuple[LlamaCppBackend, float]:
    started = time.perf_counter()
    backend = LlamaCppBackend()
    backend.load(model, plan)  # type: ignore[arg-type]  # InstalledModel is a ModelFiles
    return backend, time.perf_counter() - started


def unload_quietly(backend: LlamaCppBackend) -> None:
    """Unload without saving: the measured folders stay as they were copied."""
    if backend.engine is not None:
        backend.engine.kv_store = None
    backend.unload()


def first_turn(history: int) -> tuple[tuple[Message, ...], int]:
    """The first turn's messages (about `history` tokens) and the context that holds them."""
    first = (Message("system", "You review this Python module:\n" + long_code(history)),
             Message("user", "What does the module do, in one sentence?"))
    return first, -(-(history + 512) // 1024) * 1024


def one_length(model: object, history: int, threads: int, rounds: int,
               work: Path) -> dict:
    first, context = first_turn(history)
    folder = work / f"kv-{history}"
    plan = LoadPlan(context=context, threads=threads, kv_store=str(folder))
    warm, load_s = loaded(model, plan)
    try:
        done = ask(warm, first, max_tokens=24)
        assert warm.engine is not None
        started = time.perf_counter()
        saved = warm.engine.save_states()
        save_s = time.perf_counter() - started
        snapshot = work / f"saved-{history}"
        shutil.copytree(folder, snapshot)
        warm_stats = [ask(warm, first + (Message("assistant", done.text), Message("user", q))
                       ).stats for q in FOLLOW_UPS[:rounds]]
        warm_ttft = [s.ttft_s for s in warm_stats]
    finally:
        unload_quietly(warm)
    nexts = [first + (Message("assistant", done.text), Message("user", q))
             for q in FOLLOW_UPS[:rounds]]
    restored, restored_cached, loads, restored_new = [], [], [], []
    for i, messages in enumerate(nexts):
        copy = work / f"copy-{history}-{i}"
        shutil.copytree(snapshot, copy)
        backend, took = loaded(model, LoadPlan(context=context, threads=threads,
                                               kv_store=str(copy)))
        loads.append(took)
        try:
            stats = ask(backend, messages).stats
        finally:
            unload_quietly(backend)
        restored.append(stats.ttft_s)
        restored_cached.append((stats.cached_tokens, stats.disk_tokens))
        restored_new.append(stats.prompt_tokens - stats.cached_tokens)
    cold = []
    for messages in nexts:
        backend, _ = loaded(model, LoadPlan(context=context, threads=threads))
        try:
            cold.append(ask(backend, messages).stats.ttft_s)
        finally:
            backend.unload()
    size = sum(p.stat().st_size for p in snapshot.glob("*.kv"))
    return {
        "history_tokens": done.stats.prompt_tokens, "context": context,
        "warm_ttft_s": statistics.median(warm_ttft),
        "restored_ttft_s": statistics.median(restored),
        "cold_ttft_s": statistics.median(cold),
        "warm_runs": warm_ttft, "restored_runs": restored, "cold_runs": cold,
        "restored_cached_disk_tokens": restored_cached,
        "warm_cached_tokens": [s.cached_tokens for s in warm_stats],
        # tokens each next turn evaluated: after the first warm round the warm slot also
        # holds the previous question's turn markers, so only round 0 compares like for like
        # (the same prompt, from the first turn's cache, in memory or restored from disk)
        "warm_new_tokens": [s.prompt_tokens - s.cached_tokens for s in warm_stats],
        "restored_new_tokens": restored_new,
        "restored_over_warm_same_prompt": round(restored[0] / warm_ttft[0], 2),
        "saved_files": saved, "saved_bytes": size, "save_s": round(save_s, 3),
        "load_s": round(statistics.median([load_s, *loads]), 3),
    }


def wire(messages: tuple[Message, ...]) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in messages]


@contextlib.contextmanager
def llama_server(binary: str, model: object, context: int, threads: int,
                 slots: Path) -> Iterator[str]:
    """llama.cpp's own server on the model's file, one slot of `context` tokens, its slot
    files in `slots` (saved and restored only when asked: /slots/0?action=save|restore)."""
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--model", str(model.path), "--port", str(port),  # type: ignore[attr-defined]
         "--host", "127.0.0.1", "--alias", "m", "--parallel", "1", "--ctx-size", str(context),
         "--threads", str(threads), "--threads-batch", str(threads),
         "--slot-save-path", str(slots)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def slot_action(url: str, action: str) -> float:
    """Save or restore slot 0 as `turn.bin`; the seconds llama-server took."""
    started = time.perf_counter()
    r = httpx.post(f"{url}/slots/0?action={action}", json={"filename": "turn.bin"}, timeout=600)
    r.raise_for_status()
    return time.perf_counter() - started


def llama_server_row(binary: str, model: object, history: int, threads: int, rounds: int,
                     work: Path) -> dict:
    """The same conversation on llama-server: next-turn TTFT warm, after its own restart
    (its cache is gone), and after a restart with its manual slot save and restore."""
    first, context = first_turn(history)
    slots = work / f"slots-{history}"
    slots.mkdir()
    with llama_server(binary, model, context, threads, slots) as url:
        answer = stream_chat(url, "m", wire(first), 24)["text"]
        save_s = slot_action(url, "save")
        nexts = [wire(first + (Message("assistant", answer), Message("user", q)))
                 for q in FOLLOW_UPS[:rounds]]
        warm = [stream_chat(url, "m", m, 8)["ttft_s"] for m in nexts]
    cold, restored, restore_s = [], [], []
    for m in nexts:
        with llama_server(binary, model, context, threads, slots) as url:
            cold.append(stream_chat(url, "m", m, 8)["ttft_s"])
        with llama_server(binary, model, context, threads, slots) as url:
            restore_s.append(slot_action(url, "restore"))
            restored.append(stream_chat(url, "m", m, 8)["ttft_s"])
    return {"warm_ttft_s": statistics.median(warm), "cold_ttft_s": statistics.median(cold),
            "slot_restored_ttft_s": statistics.median(restored),
            "slot_restore_s": statistics.median(restore_s), "slot_save_s": round(save_s, 3),
            "warm_runs": warm, "cold_runs": cold, "slot_restored_runs": restored}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--history", default="1000,4000",
                        help="tokens of history, comma-separated (16000 for the third)")
    parser.add_argument("--threads", type=int, default=min(8, os.cpu_count() or 2))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--llama-server", default=os.environ.get("EMBER_LLAMA_SERVER"),
                        help="llama.cpp's llama-server (bash benchmarks/build_llama_server.sh "
                             "builds it), for its rows")
    args = parser.parse_args()
    if args.llama_server and not Path(args.llama_server).is_file():
        parser.error(f"--llama-server {args.llama_server}: no such file")
    model = Store().get(args.model)
    results = []
    with tempfile.TemporaryDirectory(prefix="ember-resume-") as work:
        for history in (int(h) for h in args.history.split(",")):
            results.append(one_length(model, history, args.threads, args.rounds, Path(work)))
            if args.llama_server:
                results[-1]["llama_server"] = llama_server_row(
                    args.llama_server, model, history, args.threads, args.rounds, Path(work))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"model": model.ref, "threads": args.threads, "rounds": args.rounds,
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
