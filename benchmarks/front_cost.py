"""CPU that `ember serve`'s front process spends per streamed token, by thread. Prints JSON.

    .venv/bin/python benchmarks/front_cost.py [--model qwen2.5-coder-0.5b-instruct]
        [--seconds 12] [--max-tokens 128]

One stream of greedy answers, one request after another, as issue 19's 1-stream level. The
front process (HTTP, the event loop, the thread that reads the worker's pipe) runs beside the
worker that decodes; on a machine whose cores all decode, every millisecond it uses is taken
from decoding. llama-server does this work in C++ threads of the decoding process, so this is
the per-token cost Ember's crash-isolating worker boundary adds (docs/notes/llamacpp-engine.md,
figures 22, 34 and 40). Counts come from /proc/PID/task/TID/stat (Linux only): CPU between two
snapshots taken around the streamed requests, after warm-up requests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script
from app.store import Store
from benchmarks.serve_load import PARALLEL, PROMPTS, REPO, free_port, stream_chat, wait_ready

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(stat: str) -> float:
    """User + system CPU seconds in the text of a /proc `stat` file; a process's counts its
    ended threads too."""
    # the fields after the command name (which may hold spaces) start at index 2
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def tasks(pid: int, name: str) -> dict[int, str]:
    """The file `name` of each thread of process `pid`, by thread id; threads that end
    while they are listed are left out (anyio's idle workers do)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = (task / name).read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of process `pid`, by thread id."""
    return {tid: cpu_s(stat) for tid, stat in tasks(pid, "stat").items()}


def children(pid: int) -> set[int]:
    """The child processes of `pid` (the model's worker, multiprocessing's resource tracker):
    the kernel lists each under the thread that started it."""
    return {int(child) for listed in tasks(pid, "children").values() for child in listed.split()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--seconds", type=float, default=12.0,
                        help="how long to stream requests for the count")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--context", type=int, default=4096)
    args = parser.parse_args()
    if not Path("/proc/self/task").is_dir():
        parser.error("this benchmark reads /proc: Linux only")
    model = Store().get(args.model)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "EMBER_THREADS": str(args.threads),
           "EMBER_CONTEXT": str(args.context)}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port),
                             "--parallel", str(PARALLEL)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, proc)
        for prompt in PROMPTS[:3]:  # loads the model; warms the code paths and the caches
            stream_chat(url, model.id, [{"role": "user", "content": prompt}], args.max_tokens)
        workers = children(proc.pid)
        front = Path(f"/proc/{proc.pid}/stat")
        before, front_before = thread_cpu_s(proc.pid), cpu_s(front.read_text())
        worker_before = sum(cpu_s(Path(f"/proc/{w}/stat").read_text()) for w in workers)
        chunks = requests = 0
        started = time.monotonic()
        while time.monotonic() - started < args.seconds:
            prompt = PROMPTS[requests % len(PROMPTS)]
            chunks += len(stream_chat(url, model.id, [{"role": "user", "content": prompt}],
                                      args.max_tokens)["stamps"])
            requests += 1
        after, front_after = thread_cpu_s(proc.pid), cpu_s(front.read_text())
        worker_after = sum(cpu_s(Path(f"/proc/{w}/stat").read_text()) for w in workers)
    finally:
        proc.terminate()
        proc.wait(30)
    if not chunks:
        sys.exit("no text was streamed: is the model installed? (ember pull "
                 f"{args.model})")
    per_chunk = {tid: (after[tid] - before.get(tid, 0.0)) * 1000 / chunks for tid in after}
    others = sorted((ms for tid, ms in per_chunk.items() if tid != proc.pid), reverse=True)
    print(json.dumps({
        "model": model.id, "threads": args.threads, "requests": requests, "chunks": chunks,
        "front_cpu_ms_per_chunk": round((front_after - front_before) * 1000 / chunks, 3),
        # uvicorn runs the event loop on the process's main thread
        "event_loop_ms_per_chunk": round(per_chunk.get(proc.pid, 0.0), 3),
        "other_threads_ms_per_chunk": [round(ms, 3) for ms in others if ms > 0],
        "worker_cpu_ms_per_chunk": round((worker_after - worker_before) * 1000 / chunks, 3),
        "clock_tick_ms": round(1000 / TICKS_PER_S, 1)}))


if __name__ == "__main__":
    main()
