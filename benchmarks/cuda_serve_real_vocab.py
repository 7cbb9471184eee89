"""A real-vocabulary model end to end through `ember serve` on the cuda backend, driven with
the OpenAI client (issue 44): random weights of a Llama-3 shape with Llama 3's tokenizer
(llama.cpp's ggml-vocab-llama-bpe.gguf) and its chat template, written as an F16 GGUF,
imported into a fresh data folder, served by `python -m app.cli serve --backend cuda` in a
child process, then:

- streaming: one chat completion streamed, its chunks and tokens/s;
- continuous batching: `--concurrent` requests at once against one alone, aggregate tokens/s;
- the prefix cache: the same prompt twice, the second's usage.prompt_tokens_details.cached_tokens;
- the backend: `/api/ps` names cuda for the loaded model;
- speculation: an edit prompt with prompt lookup on (not adaptive) and off, greedy: both
  answers, tokens/s and accepted predictions. Random weights copy nothing from the prompt, so
  this proves the path and measures its cost, not what lookup gains on a real model.

Prints JSON with `ok` per check. Exit status 1 if any check failed.

    python3 benchmarks/cuda_serve_real_vocab.py [--shape llama3.2-1b] [--vocab FILE]

Shapes: tiny (2 layers of 128: the CPU rehearsal and the integration test), llama3.2-1b (the
GPU step: 2.5 GB of F16 written in seconds), llama3-8b (16 GB: writing and loading it takes
minutes, more than the GPU checks' budget gives one step).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    context: int


SHAPES = {"tiny": Shape(2, 128, 256, 4, 2, 2048),
          "llama3.2-1b": Shape(16, 2048, 8192, 32, 8, 8192),
          "llama3-8b": Shape(32, 4096, 14336, 32, 8, 8192)}

# Llama 3's chat template (the Instruct models' tokenizer_config.json, without tools)
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role']"
    " + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{%- endif %}")

EDIT_PROMPT = ("Repeat this code with one change: rename `total` to `acc`.\n\n```python\n"
               "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
               "    return total / len(values)\n```")


def write_gguf(path: Path, shape_name: str, vocab_file: Path) -> Path:
    """A llama GGUF of `shape_name` with random F16 weights (normal 0.02, norms 1) and the
    tokenizer of `vocab_file`, plus Llama 3's chat template where the vocabulary has none.
    The weights are slices of one random pool (at random offsets), which writes gigabytes in
    seconds; a random model needs no more randomness than that."""
    import gguf
    import numpy as np

    from backends.gguf_tensors import FastGGUFReader  # gguf's own reader takes a minute

    shape = SHAPES[shape_name]
    head_dim = shape.hidden // shape.heads
    reader = FastGGUFReader(str(vocab_file))
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"random {shape_name} real vocab")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    vocab = 0
    has_template = False
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            vocab = len(value)
        has_template |= key == "tokenizer.chat_template"
        sub = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, value, field.types[0], sub_type=sub)
    if not vocab:
        raise SystemExit(f"{vocab_file}: no tokenizer.ggml.tokens, not a vocabulary GGUF")
    if not has_template:
        writer.add_chat_template(LLAMA3_TEMPLATE)
    writer.add_vocab_size(vocab)
    rng = np.random.default_rng(0)
    pool = (rng.standard_normal(1 << 22, dtype=np.float32) * 0.02).astype(np.float16)

    def weight(rows: int, cols: int) -> Any:
        start = int(rng.integers(0, pool.size))
        return np.resize(np.roll(pool, -start), rows * cols).reshape(rows, cols)

    ones = np.ones(shape.hidden, dtype=np.float32)
    writer.add_tensor("token_embd.weight", weight(vocab, shape.hidden))
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", weight(vocab, shape.hidden))
    kv = shape.kv_heads * head_dim
    for i in range(shape.layers):
        for name, rows, cols in (("attn_q", shape.hidden, shape.hidden),
                                 ("attn_k", kv, shape.hidden), ("attn_v", kv, shape.hidden),
                                 ("attn_output", shape.hidden, shape.hidden),
                                 ("ffn_gate", shape.ffn, shape.hidden),
                                 ("ffn_up", shape.ffn, shape.hidden),
                                 ("ffn_down", shape.hidden, shape.ffn)):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(rows, cols))
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ember(home: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT,
                          env=_env(home), capture_output=True, text=True, **kw)


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, EMBER_HOME=str(home))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


class Server:
    """`ember serve --backend cuda` in a child process, until closed."""

    def __init__(self, home: Path, parallel: int, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port),
             "--backend", "cuda", "--parallel", str(parallel)],
            cwd=ROOT, env=_env(home), stdout=self._log, stderr=subprocess.STDOUT)
        self.log = log

    def wait(self, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ember serve exited with {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"ember serve did not answer in {timeout:.0f} s")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def chat(client: Any, model: str, prompt: str, tokens: int, **kw: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    r = client.chat.completions.create(model=model, temperature=0, max_tokens=tokens,
                                       messages=[{"role": "user", "content": prompt}], **kw)
    return r, time.perf_counter() - start


def drive(url: str, model: str, tokens: int, concurrent: int) -> dict[str, Any]:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    out: dict[str, Any] = {}
    chat(client, model, "Warm up.", 4)  # the model's load and first compile fall out

    start = time.perf_counter()
    first: float | None = None
    pieces: list[str] = []
    usage = None
    for chunk in client.chat.completions.create(
            model=model, temperature=0, max_tokens=tokens, stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "Write a haiku about a quiet GPU."}]):
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            pieces.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    wall = time.perf_counter() - start
    n = usage.completion_tokens if usage else 0
    out["streaming"] = {"ok": bool(pieces) and n > 0, "chunks": len(pieces),
                        "completion_tokens": n, "ttft_s": round((first or start) - start, 3),
                        "tok_s": round(n / (wall - ((first or start) - start)), 2)
                        if n > 1 and first else None}

    prompts = [f"Write a short story about robot number {i}." for i in range(concurrent)]
    alone, alone_s = chat(client, model, prompts[0], tokens)
    results: list[Any] = [None] * concurrent

    def one(i: int) -> None:
        results[i] = chat(client, model, prompts[i], tokens)

    start = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrent)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    done = [r for r in results if r is not None]
    total = sum(r[0].usage.completion_tokens for r in done)
    single = alone.usage.completion_tokens / alone_s
    out["concurrent"] = {"ok": len(done) == concurrent and all(r[0].choices for r in done),
                         "requests": concurrent, "completion_tokens": total,
                         "wall_s": round(wall, 3), "aggregate_tok_s": round(total / wall, 2),
                         "one_request_tok_s": round(single, 2),
                         "aggregate_over_one": round(total / wall / single, 2),
                         "same_as_alone": done[0][0].choices[0].message.content
                         == alone.choices[0].message.content}

    prompt = "Explain what a prefix cache does. " * 8
    a, _ = chat(client, model, prompt, 8)
    b, _ = chat(client, model, prompt, 8)
    details = b.usage.prompt_tokens_details
    cached = details.cached_tokens if details else 0
    out["prefix_cache"] = {"ok": bool(cached) and cached > 0,
                           "prompt_tokens": b.usage.prompt_tokens, "cached_tokens": cached,
                           "same_answer": a.choices[0].message.content
                           == b.choices[0].message.content}

    plain, plain_s = chat(client, model, EDIT_PROMPT, tokens, extra_body={"speculative": False})
    spec, spec_s = chat(client, model, EDIT_PROMPT, tokens,
                        extra_body={"speculative": {"method": "lookup", "adaptive": False}})
    sd = spec.usage.completion_tokens_details
    plain_rate = plain.usage.completion_tokens / plain_s
    spec_rate = spec.usage.completion_tokens / spec_s
    same = spec.choices[0].message.content == plain.choices[0].message.content
    out["speculation"] = {"ok": same, "method": "lookup", "identical": same,
                          "plain_tok_s": round(plain_rate, 2), "lookup_tok_s": round(spec_rate, 2),
                          "lookup_over_plain": round(spec_rate / plain_rate, 2),
                          "accepted_prediction_tokens":
                              sd.accepted_prediction_tokens if sd else None,
                          "rejected_prediction_tokens":
                              sd.rejected_prediction_tokens if sd else None,
                          "note": "random weights: the cost of lookup, not its gain"}

    import httpx

    loaded = httpx.get(url + "/api/ps", timeout=30).json()["models"]
    out["backend"] = {"ok": [m["backend"] for m in loaded] == ["cuda"],
                      "loaded": [{"name": m["name"], "backend": m["backend"]} for m in loaded]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3.2-1b")
    ap.add_argument("--vocab", type=Path, default=None,
                    help="a vocabulary GGUF (default: ggml-vocab-llama-bpe.gguf from the "
                         "llama-cpp-python sdist in the wheel cache)")
    ap.add_argument("--tokens", type=int, default=None,
                    help="new tokens per request (default 64 on a GPU, 12 on a CPU)")
    ap.add_argument("--concurrent", type=int, default=4)
    ap.add_argument("--work", type=Path, default=None, help="folder for the model and data "
                    "folder (default: a temporary one, removed after)")
    args = ap.parse_args(argv)
    if args.vocab is not None and not args.vocab.is_file():
        raise SystemExit(f"--vocab {args.vocab}: no such file")
    if args.concurrent < 2:
        raise SystemExit(f"--concurrent must be at least 2, not {args.concurrent}")
    import torch

    tokens = args.tokens or (64 if torch.cuda.is_available() else 12)
    with tempfile.TemporaryDirectory(prefix="ember-real-vocab-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.vocab is None:
            from benchmarks.gpu_offload import default_vocab
            vocab = default_vocab(work)
        else:
            vocab = args.vocab
        start = time.perf_counter()
        path = write_gguf(work / f"random-{args.shape}-real-vocab.gguf", args.shape, vocab)
        result: dict[str, Any] = {
            "shape": args.shape, "vocab": vocab.name, "file_bytes": path.stat().st_size,
            "write_s": round(time.perf_counter() - start, 1), "tokens_per_request": tokens,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
        home = work / "home"
        imported = ember(home, "import", str(path), timeout=600)
        if imported.returncode != 0:
            raise SystemExit(f"ember import failed: {imported.stderr[-2000:]}")
        path.unlink()  # the store holds its own copy
        listed = json.loads(ember(home, "list", "--json", timeout=120).stdout)
        model = listed[0]["id"] if isinstance(listed, list) else listed["models"][0]["id"]
        result["model"] = model
        server = Server(home, args.concurrent, work / "serve.log")
        try:
            start = time.perf_counter()
            server.wait(300)
            result["serve_start_s"] = round(time.perf_counter() - start, 1)
            result |= drive(server.url, model, tokens, args.concurrent)
        finally:
            server.close()
    checks = ("streaming", "concurrent", "prefix_cache", "speculation", "backend")
    result["ok"] = all(result[c]["ok"] for c in checks)
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
