"""Searching a conversation's document pieces: plain numpy against sqlite-vec, for N unit
vectors of D float32 (all-MiniLM-L6-v2's 384), the top K by cosine. Prints JSON.

    .venv/bin/python benchmarks/document_search.py [--vectors 10000] [--dims 384] [--k 20]

app/documents/library.py keeps vectors as BLOBs in documents.db and searches them with numpy;
this measures that (reading the BLOBs from SQLite, and the product alone, once in memory)
against sqlite-vec 0.1.9 (`pip install sqlite-vec`, not an Ember dependency): its `vec0`
virtual table's KNN query and its `vec_distance_cosine` over a plain table. sqlite-vec is a
loadable extension: a Python whose sqlite3 cannot load extensions (built without
`enable_load_extension`, as Ember's development Python and macOS's system Python are) gets
"unavailable" with the reason. Both paths must agree on the top K.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import time
from collections.abc import Callable

import numpy as np


def timed(run: Callable[[], object], repeats: int) -> tuple[float, object]:
    """The median milliseconds of `repeats` runs, and the last run's result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vectors", type=int, default=10_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((args.vectors, args.dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[123] + 0.5 * rng.standard_normal(args.dims).astype(np.float32)
    query /= np.linalg.norm(query)

    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE pieces (id INTEGER PRIMARY KEY, vector BLOB)")
    db.executemany("INSERT INTO pieces VALUES (?, ?)",
                   [(i, v.tobytes()) for i, v in enumerate(vectors)])

    def top(scores: np.ndarray) -> list[int]:
        best = np.argpartition(-scores, args.k)[:args.k]
        return [int(i) for i in best[np.argsort(-scores[best])]]

    def numpy_from_sqlite() -> list[int]:
        rows = db.execute("SELECT vector FROM pieces ORDER BY id").fetchall()
        matrix = np.frombuffer(b"".join(r[0] for r in rows), dtype=np.float32)
        return top(matrix.reshape(len(rows), args.dims) @ query)

    read_ms, expected = timed(numpy_from_sqlite, args.repeats)
    product_ms, in_memory = timed(lambda: top(vectors @ query), args.repeats)
    assert in_memory == expected
    result: dict[str, object] = {
        "vectors": args.vectors, "dims": args.dims, "k": args.k,
        "numpy": {"version": np.__version__, "read_blobs_and_search_ms": round(read_ms, 2),
                  "search_in_memory_ms": round(product_ms, 3)},
    }
    result["sqlite_vec"] = sqlite_vec_timings(db, vectors, query, args, expected)
    print(json.dumps(result, indent=2))


def sqlite_vec_timings(db: sqlite3.Connection, vectors: np.ndarray, query: np.ndarray,
                       args: argparse.Namespace, expected: list[int]) -> dict[str, object]:
    try:
        import sqlite_vec
    except ImportError:
        return {"unavailable": "sqlite-vec is not installed (pip install sqlite-vec)"}
    if not hasattr(db, "enable_load_extension"):
        return {"unavailable": "this Python's sqlite3 cannot load extensions "
                               "(built without enable_load_extension)"}
    db.enable_load_extension(True)
    sqlite_vec.load(db)
    db.enable_load_extension(False)
    db.execute(f"CREATE VIRTUAL TABLE vec USING vec0(embedding float[{args.dims}] "
               "distance_metric=cosine)")
    start = time.perf_counter()
    db.executemany("INSERT INTO vec(rowid, embedding) VALUES (?, ?)",
                   [(i, v.tobytes()) for i, v in enumerate(vectors)])
    insert_ms = (time.perf_counter() - start) * 1000
    blob = query.tobytes()

    def knn() -> list[int]:
        return [r[0] for r in db.execute(
            "SELECT rowid FROM vec WHERE embedding MATCH ? AND k = ? ORDER BY distance",
            (blob, args.k))]

    def scan() -> list[int]:
        return [r[0] for r in db.execute(
            "SELECT id FROM pieces ORDER BY vec_distance_cosine(vector, ?) LIMIT ?",
            (blob, args.k))]

    knn_ms, found = timed(knn, args.repeats)
    scan_ms, scanned = timed(scan, args.repeats)
    return {"version": db.execute("SELECT vec_version()").fetchone()[0],
            "vec0_insert_all_ms": round(insert_ms, 1), "vec0_knn_ms": round(knn_ms, 2),
            "distance_scan_ms": round(scan_ms, 2),
            "same_top_k_as_numpy": found == expected and scanned == expected}


if __name__ == "__main__":
    main()
