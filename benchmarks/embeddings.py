"""Embedding speed of an installed embedding model, as documents in the chat see it, and the
thread count's effect on it. Prints JSON (docs/notes/embeddings.md quotes it).

    .venv/bin/python benchmarks/embeddings.py [--model all-minilm-l6-v2] [--pieces 64]
        [--tokens 200]

- runtime: pieces of about `--tokens` tokens (special tokens included) through the Runtime:
  one `Runtime.embed` call per piece, then `RuntimeEmbedder.embed_documents` for all;
- threads: the same pieces in llama-cpp-python directly with 1 thread and with every core
  (the load plan's choice), one decode per piece, as the llamacpp backend embeds.
The load average is printed with each figure: on a shared machine it decides the result.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.documents.embedder import RuntimeEmbedder
from app.runtime import Runtime
from app.store import Store

TEXT = ("the model reads every page of the report and the answer cites where it found each "
        "fact about rivers mountains engines budgets contracts payments schedules tests code "
        "functions classes memory network latency cache disk search index query document")
WORDS = TEXT.split(" ")


def pieces(embedder: RuntimeEmbedder, count: int, tokens: int) -> list[str]:
    rng = random.Random(0)
    out = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(tokens)]
        while embedder.count_tokens(" ".join(words)) > tokens - 2:  # [CLS] and [SEP]
            words.pop()
        out.append(" ".join(words))
    return out


def rate(count: int, fn) -> dict:
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    return {"pieces_per_s": round(count / seconds, 2), "seconds": round(seconds, 2),
            "load_average": round(os.getloadavg()[0], 2)}


def by_threads(path: Path, texts: list[str]) -> dict:
    import llama_cpp

    import backends.llamacpp  # noqa: F401  (loads llama.cpp's CPU backend)

    result = {}
    for threads in sorted({1, os.cpu_count() or 1}):
        model = llama_cpp.Llama(str(path), embedding=True, verbose=False, n_ctx=512,
                                n_batch=512, n_ubatch=512, n_threads=threads,
                                n_threads_batch=threads)
        model.embed(texts[0])
        result[str(threads)] = rate(len(texts), lambda m=model: [m.embed(t) for t in texts])
        model.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all-minilm-l6-v2")
    parser.add_argument("--pieces", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    with Runtime(store=Store()) as rt:
        embedder = RuntimeEmbedder(rt, args.model)
        texts = pieces(embedder, args.pieces, args.tokens)
        embedder.embed_documents(texts[:2])  # load and warm up
        one_call_each = rate(len(texts), lambda: [rt.embed(embedder.model, [t]) for t in texts])
        documents = rate(len(texts), lambda: embedder.embed_documents(texts))
        start = time.perf_counter()
        for t in texts:
            embedder.count_tokens(t)
        count_ms = (time.perf_counter() - start) / len(texts) * 1000
        path = rt.store.get(embedder.model).path
    print(json.dumps({
        "model": embedder.model, "pieces": len(texts), "tokens_per_piece": args.tokens,
        "cpu_count": os.cpu_count(),
        "runtime": {"one_call_per_piece": one_call_each, "embed_documents": documents,
                    "count_tokens_ms": round(count_ms, 3)},
        "threads": by_threads(path, texts)}, indent=2))


if __name__ == "__main__":
    main()
