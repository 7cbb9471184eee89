"""One KV buffer for all sequences (kv_unified) against a KV stream per sequence, in
llama.cpp through llama-cpp-python, without Ember's engine. Prints JSON.

    .venv/bin/python benchmarks/kv_streams.py [--model qwen2.5-coder-0.5b-instruct]

- prefill: a 1,100-token prompt in 512-row batches, with no other cache and with 3,000 cells
  of three other conversations held (in one buffer every row scans their cells, masked);
- decode: one step of 1 sequence, 4 on consecutive ids, 4 on scattered ids, and 8, each
  sequence with 100 cells (separate streams are split at every gap in the ids, a pass over
  the weights each). Milliseconds per step, median of 30.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import llama_cpp
from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel
from llama_cpp._logger import set_verbose

import backends.llamacpp  # noqa: F401  (loads llama.cpp's CPU backend)
from app.store import Store

N_SEQ, N_CTX_SEQ, BATCH = 8, 4096, 512


def context(model: LlamaModel, unified: bool, threads: int) -> LlamaContext:
    p = llama_cpp.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch = N_CTX_SEQ * N_SEQ, BATCH, BATCH
    p.n_seq_max, p.kv_unified = N_SEQ, unified
    p.n_threads = p.n_threads_batch = threads
    return LlamaContext(model=model, params=p, verbose=False)


def decode(ctx: LlamaContext, batch: LlamaBatch, rows: list[tuple[int, int, bool]]) -> None:
    """One llama_decode of `rows`: (seq id, position, logits wanted)."""
    b = batch.batch
    b.n_tokens = len(rows)
    for j, (seq, pos, logits) in enumerate(rows):
        b.token[j], b.pos[j], b.seq_id[j][0], b.n_seq_id[j] = 13 + j % 97, pos, seq, 1
        b.logits[j] = logits
    ctx.decode(batch)


def prompt(ctx: LlamaContext, batch: LlamaBatch, seq: int, n: int) -> None:
    for start in range(0, n, BATCH):
        k = min(BATCH, n - start)
        decode(ctx, batch, [(seq, start + j, j == k - 1) for j in range(k)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_verbose(False)
    llama_cpp.llama_backend_init()
    path = Store().get(args.model).path
    model = LlamaModel(path_model=str(path), params=llama_cpp.llama_model_default_params(),
                       verbose=False)
    batch = LlamaBatch(n_tokens=BATCH, embd=0, n_seq_max=N_SEQ, verbose=False)
    out: dict = {"model": args.model, "threads": args.threads, "prefill_1100_s": {},
                 "decode_step_ms": {}}
    for unified in (True, False):
        name = "one_buffer" if unified else "stream_per_sequence"
        ctx = context(model, unified, args.threads)
        memory = llama_cpp.llama_get_memory(ctx.ctx)
        for held in (0, 3000):
            runs = []
            for _ in range(2):
                llama_cpp.llama_memory_clear(memory, True)
                for seq in range(3 if held else 0):
                    prompt(ctx, batch, seq, held // 3)
                started = time.perf_counter()
                prompt(ctx, batch, 5, 1100)
                runs.append(round(time.perf_counter() - started, 3))
            out["prefill_1100_s"][f"{name}, {held} other cells"] = runs
        for label, seqs in (("1", [1]), ("4 consecutive", [1, 2, 3, 4]),
                            ("4 scattered", [1, 3, 5, 7]), ("8", list(range(8)))):
            llama_cpp.llama_memory_clear(memory, True)
            for seq in range(N_SEQ):
                prompt(ctx, batch, seq, 100)
            times = []
            for i in range(30):
                started = time.perf_counter()
                decode(ctx, batch, [(seq, 100 + i, True) for seq in seqs])
                times.append(time.perf_counter() - started)
            out["decode_step_ms"][f"{name}, {label}"] = round(1000 * statistics.median(times),
                                                              2)
        ctx.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
