"""Tokens/s of a GGUF model by the layers offloaded to the GPU: Ember's llama.cpp backend (the
worker's own load and decode path, `LlamaCppBackend.generate`, greedy) against llama.cpp's
own `llama-bench` on the same libraries, in the same run, on whatever device is there.
Prints JSON.

    .venv/bin/python benchmarks/gpu_offload.py [--model ID|PATH | --random llama3-8b]
        [--layers -1,12,0] [--prompt 512] [--tokens 64] [--repeat 3] [--llama-bench DIR]

- `--model`: an installed model (EMBER_HOME, else the test home) or a .gguf path.
- `--random SHAPE`: random weights (Q4_0) of a real shape written here, with a real vocabulary
  (`--vocab`, default llama.cpp's ggml-vocab-llama-bpe.gguf from the sdist in the wheel cache):
  what a GPU machine runs, since no model file can be carried there. Shapes: llama3-8b, tiny.
- `--layers`: llama.cpp's n_gpu_layers values (-1: all; n >= 1: the output layer and n - 1
  repeating layers; 0: the CPU).
- `--llama-bench DIR`: a llama-bench built with GGML_BACKEND_DL (benchmarks/build_llama_bench.sh,
  default: that script's cache). It runs in a folder of its own holding the installed
  llama_cpp/lib libraries and the CPU module Ember chose, so both sides run the same engine
  and backends. Without one, Ember's side alone.

Each side and layer count is a fresh process. Ember, as llama-bench's pp and tg tests: a
prompt of `--prompt` tokens and one token (prompt tokens/s = prompt tokens / time to the first
token), then `--tokens` greedy tokens after a short prompt (decode tokens/s from the backend's
own Stats); each repeat starts differently, so the prefix cache cannot help.
llama-bench: `-p PROMPT -n TOKENS -r REPEAT -b 512 -ub 512` with the same threads.
The report gives medians and Ember / llama-bench per layer count. Goal (issue 39): >= 0.97x
at every split.

With all layers on the GPU (-1), the report also gives the bytes decode reads per token (the
file's tensors less the token embedding, of which it reads one row) times Ember's decode
tokens/s, against the bandwidth a copy on the first GPU reaches (`device_copy_gbps`, from
backends.llamacpp.device_report): decode's share of the bandwidth it could use.

GPU environment: GGML_VK_VISIBLE_DEVICES=0 makes llama.cpp use lavapipe (a CPU Vulkan device)
on a machine without a GPU; it is passed to both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_HOME = Path.home() / ".cache" / "ember" / "test-home"
CACHE = Path(os.environ.get("EMBER_WHEEL_CACHE", Path.home() / ".cache" / "ember" / "wheels"))
TEXT = ("The quick brown fox jumps over the lazy dog while the compiler checks every loop "
        "for vector instructions and the scheduler moves threads between two small cores. ")

# name: (layers, hidden, ffn, heads, kv heads, context)
SHAPES = {"llama3-8b": (32, 4096, 14336, 32, 8, 8192), "tiny": (4, 256, 512, 4, 2, 2048)}
Q4_0_BLOCK = 18  # bytes of 32 weights: an f16 scale and 16 bytes of nibbles


def random_q4_0(rng, rows: int, cols: int):
    import numpy as np

    blocks = rng.integers(0, 256, size=(rows, cols // 32, Q4_0_BLOCK), dtype=np.uint8)
    blocks[:, :, :2] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    return blocks.reshape(rows, cols // 32 * Q4_0_BLOCK)


def write_random_gguf(path: Path, shape: str, vocab_file: Path) -> Path:
    """A llama-architecture GGUF with random Q4_0 weights of `shape` and the tokenizer of
    `vocab_file` (one of llama.cpp's ggml-vocab-*.gguf)."""
    import gguf
    import numpy as np

    layers, hidden, ffn, heads, kv_heads, context = SHAPES[shape]
    reader = gguf.GGUFReader(str(vocab_file))
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"random {shape}")
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            vocab = len(value)
        sub = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, value, field.types[0], sub_type=sub)
    writer.add_vocab_size(vocab)
    rng = np.random.default_rng(0)
    ones = np.ones(hidden, dtype=np.float32)
    q = gguf.GGMLQuantizationType.Q4_0
    writer.add_tensor("token_embd.weight", random_q4_0(rng, vocab, hidden), raw_dtype=q)
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", random_q4_0(rng, vocab, hidden), raw_dtype=q)
    head_dim = hidden // heads
    for i in range(layers):
        kv = kv_heads * head_dim
        for name, rows, cols in (("attn_q", hidden, hidden), ("attn_k", kv, hidden),
                                 ("attn_v", kv, hidden), ("attn_output", hidden, hidden),
                                 ("ffn_gate", ffn, hidden), ("ffn_up", ffn, hidden),
                                 ("ffn_down", hidden, ffn)):
            writer.add_tensor(f"blk.{i}.{name}.weight", random_q4_0(rng, rows, cols), raw_dtype=q)
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class _File:
    """What LlamaCppBackend.load needs of a model (backends.base.ModelFiles)."""

    def __init__(self, path: Path) -> None:
        self.path, self.id, self.ref, self.format = path, path.stem, path.stem, "gguf"
        self.architecture, self.context_length = "llama", 0


def ember_child(model: str, gpu_layers: int, prompt: int, tokens: int, repeat: int,
                threads: int) -> dict:
    """One process: Ember's backend loads the model with `gpu_layers`, then `repeat` times a
    fresh prompt and greedy tokens."""
    sys.path.insert(0, str(ROOT))
    from backends.base import DoneEvent, GenerationRequest, LoadPlan, SamplingParams
    from backends.llamacpp.backend import LlamaCppBackend

    backend = LlamaCppBackend()
    changed = backend.load(_File(Path(model)), LoadPlan(
        context=prompt + tokens + 64, threads=threads, gpu_layers=gpu_layers, batch=512))
    if changed is not None:
        raise SystemExit(f"the backend changed the plan: {changed.reason}")
    ids = backend.tokenize(TEXT * (prompt // 8 + 2))

    def run(text: str, max_tokens: int):
        request = GenerationRequest(prompt=text, sampling=SamplingParams(
            temperature=0, max_tokens=max_tokens), speculative=None)
        return next(e.stats for e in backend.generate(request) if isinstance(e, DoneEvent))

    runs = []
    for r in range(repeat + 1):  # the first is a warm-up (pages, buffers, shader pipelines)
        # as llama-bench's pp and tg tests: a long prompt alone, then tokens after a short one
        # (tg starts from an empty cache: after a long prompt each token would read its cells)
        long = run(f"{r} " + backend.detokenize(ids[: prompt - 2]), 1)
        short = run(f"{r} " + backend.detokenize(ids[:6]), tokens)
        if r:
            runs.append({"prompt_tokens": long.prompt_tokens,
                         "completion_tokens": short.completion_tokens,
                         "prompt_tps": long.prompt_tokens / long.ttft_s,
                         "decode_tps": short.decode_tokens_per_s})
    backend.unload()
    return {"runs": runs, "prompt_tps": statistics.median(r["prompt_tps"] for r in runs),
            "decode_tps": statistics.median(r["decode_tps"] for r in runs)}


def bench_folder(llama_bench: Path, into: Path) -> Path:
    """llama-bench with the installed llama_cpp libraries beside it (over its own of the same
    names), the CPU module Ember chose as libggml-cpu.so, and the GPU modules installed into
    the data folder (EMBER_LLAMA_MODULES)."""
    sys.path.insert(0, str(ROOT))
    from backends.llamacpp import cpu_variant
    from backends.llamacpp.ggml_backends import lib_dir

    for f in llama_bench.iterdir():
        shutil.copy2(f, into / f.name)
    for f in lib_dir().iterdir():
        if f.is_file() and ".so" in f.name:
            shutil.copy2(f, into / f.name)
    if cpu_variant.chosen is not None and cpu_variant.chosen.library is not None:
        shutil.copy2(cpu_variant.chosen.library, into / "libggml-cpu.so")
    from backends.llamacpp.added_modules import added_modules

    for module in added_modules()[0]:  # `ember cuda install`'s, as Ember's worker loads them
        if not (into / module.path.name).exists():
            shutil.copy2(module.path, into / module.path.name)
    return into / "llama-bench"


def llama_bench(binary: Path, model: str, gpu_layers: int, prompt: int, tokens: int,
                repeat: int, threads: int) -> dict:
    ngl = 999 if gpu_layers < 0 else gpu_layers
    out = subprocess.run([str(binary), "-m", model, "-ngl", str(ngl), "-p", str(prompt),
                          "-n", str(tokens), "-r", str(repeat), "-t", str(threads),
                          "-b", "512", "-ub", "512", "-o", "json"],
                         capture_output=True, text=True, timeout=3600, cwd=binary.parent)
    if out.returncode != 0:
        raise SystemExit(f"llama-bench failed: {out.stderr[-2000:]}")
    rows = json.loads(out.stdout)
    pp = next(r for r in rows if r["n_prompt"] and not r["n_gen"])
    tg = next(r for r in rows if r["n_gen"] and not r["n_prompt"])
    return {"prompt_tps": pp["avg_ts"], "decode_tps": tg["avg_ts"],
            "backends": pp.get("backends"), "gpu_info": pp.get("gpu_info")}


def resolve_model(args: argparse.Namespace, work: Path) -> Path:
    if args.random:
        vocab = Path(args.vocab) if args.vocab else default_vocab(work)
        return write_random_gguf(work / f"random-{args.random}.gguf", args.random, vocab)
    if args.model.endswith(".gguf"):
        return Path(args.model)
    os.environ.setdefault("EMBER_HOME", str(TEST_HOME))
    sys.path.insert(0, str(ROOT))
    from app.store import Store

    return Store().get(args.model).path


def default_vocab(work: Path) -> Path:
    import tarfile

    sdists = sorted((CACHE / "sdist").glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        raise SystemExit("no llama-cpp-python sdist in the wheel cache: pass --vocab")
    with tarfile.open(sdists[-1]) as tar:
        member = next(m for m in tar.getmembers()
                      if m.name.endswith("models/ggml-vocab-llama-bpe.gguf"))
        member.name = "ggml-vocab-llama-bpe.gguf"
        tar.extract(member, work)
    return work / member.name


def device_copy_gbps() -> float | None:
    """The first GPU's copy bandwidth, from the device report (a child process, like the
    app's probe)."""
    out = subprocess.run([sys.executable, "-m", "backends.llamacpp.device_report"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    try:
        report = json.loads(out.stdout.splitlines()[-1])
    except (IndexError, ValueError):
        return None
    gpus = [d["name"] for d in report["devices"] if d["type"] in ("gpu", "igpu")]
    return report["copy_gbps"].get(gpus[0]) if gpus else None


def decode_bytes(model: str) -> int:
    """What one decode step reads of the weights: every tensor but the token embedding."""
    sys.path.insert(0, str(ROOT))
    from app.gguf_file import read_gguf

    info = read_gguf(model, check_architecture=False)
    return info.data_bytes - info.embedding[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--random", choices=sorted(SHAPES))
    parser.add_argument("--vocab")
    parser.add_argument("--layers", default="-1,0")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--llama-bench", help="folder of a GGML_BACKEND_DL llama-bench")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, layers, prompt, tokens, repeat, threads = args.child
        print(json.dumps(ember_child(model, int(layers), int(prompt), int(tokens), int(repeat),
                                     int(threads))))
        return
    bench_dir = Path(args.llama_bench) if args.llama_bench else CACHE / "llama-bench-0.3.36-dl1"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = str(resolve_model(args, work))
        binary = None
        if (bench_dir / "llama-bench").is_file():
            (work / "bench").mkdir()
            binary = bench_folder(bench_dir, work / "bench")
        report: dict = {"model": args.random or args.model, "prompt": args.prompt,
                        "tokens": args.tokens, "repeat": args.repeat, "threads": args.threads,
                        "GGML_VK_VISIBLE_DEVICES": os.environ.get("GGML_VK_VISIBLE_DEVICES"),
                        "llama_bench": str(bench_dir) if binary else None, "by_layers": {}}
        for layers in [int(x) for x in args.layers.split(",")]:
            out = subprocess.run(
                [sys.executable, __file__, "--child", model, str(layers), str(args.prompt),
                 str(args.tokens), str(args.repeat), str(args.threads)],
                capture_output=True, text=True, timeout=3600, cwd=ROOT)
            row: dict = {"ember": json.loads(out.stdout.splitlines()[-1]) if out.returncode == 0
                         else {"error": out.stderr.strip().splitlines()[-1:]}}
            if binary is not None:
                try:
                    row["llama_bench"] = llama_bench(binary, model, layers, args.prompt,
                                                     args.tokens, args.repeat, args.threads)
                except (SystemExit, subprocess.TimeoutExpired, StopIteration) as e:
                    row["llama_bench"] = {"error": str(e)[-2000:]}
                if "error" not in row["ember"] and "error" not in row["llama_bench"]:
                    for kind in ("prompt_tps", "decode_tps"):
                        row[f"{kind}_ratio"] = round(
                            row["ember"][kind] / row["llama_bench"][kind], 3)
            if layers == -1 and "error" not in row["ember"]:
                copy = device_copy_gbps()
                read = row["ember"]["decode_tps"] * decode_bytes(model) / 1e9
                row["decode_read_gbps"] = round(read, 1)
                report["device_copy_gbps"] = copy
                row["decode_share_of_copy"] = round(read / copy, 3) if copy else None
            report["by_layers"][str(layers)] = row
            print(json.dumps({str(layers): row}), file=sys.stderr)
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
