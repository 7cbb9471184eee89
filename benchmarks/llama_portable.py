"""What the portable llama.cpp costs: decode and prompt-eval tokens/s of a -march=native build
(packaging/llama_cpp_wheel.sh), the bundle's x86-64-v3 baseline and its AVX-512 variants, on
the same model in the same run. Each measurement is a fresh process: the native build through
LLAMA_CPP_LIB_PATH (llama_cpp reads it once, at import), the installed portable build's
baseline and variants through EMBER_LLAMA_VARIANT (backends.llamacpp loads that CPU module,
packaging/install_llama_cpp.sh installs them); builds alternate
within each round and the report gives medians, bests (on a shared machine the run least
slowed by other work) and each build's ratio to native. Prints JSON.

    .venv/bin/python benchmarks/llama_portable.py [--model qwen2.5-coder-0.5b-instruct]
        [--tokens 128] [--prompt 256] [--repeat 5] [--threads N]

Models come from EMBER_HOME, else the test home (~/.cache/ember/test-home). The portable
builds are the installed ones (packaging/install_llama_cpp.sh).
Decode: `--tokens` single-token llama_decode calls after a short prompt, greedy, timed
together. Prompt eval: one `--prompt`-token batch into an empty cache.

Target (issue 18): the portable build within 10% of native decode speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_HOME = Path.home() / ".cache" / "ember" / "test-home"
TEXT = ("The quick brown fox jumps over the lazy dog while the compiler checks every loop "
        "for vector instructions and the scheduler moves threads between two small cores. ")


def child(model: str, tokens: int, prompt: int, threads: int) -> dict:
    """One build, one process: load, eval a prompt, decode; tokens/s of each."""
    sys.path.insert(0, str(ROOT))
    import llama_cpp
    import numpy as np

    import backends.llamacpp  # noqa: F401  (the CPU module EMBER_LLAMA_VARIANT names)

    llm = llama_cpp.Llama(model_path=model, n_ctx=prompt + tokens + 64, n_batch=prompt,
                          n_threads=threads, verbose=False)
    ids = llm.tokenize(TEXT.encode() * (prompt // 8 + 1), add_bos=False)[:prompt]
    llm.eval(ids[:8])  # warm-up: the weights paged in from the mmapped file, buffers made
    llm.reset()
    start = time.perf_counter()
    llm.eval(ids)
    prompt_s = time.perf_counter() - start

    llm.reset()
    llm.eval(ids[:16])
    token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    start = time.perf_counter()
    for _ in range(tokens):
        llm.eval([token])
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    decode_s = time.perf_counter() - start
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    return {"lib": str(llama_cpp.llama_cpp._base_path), "system_info": info,
            "prompt_tok_s": prompt / prompt_s, "decode_tok_s": tokens / decode_s}


def native_wheel() -> Path:
    """The -march=native wheel (packaging/llama_cpp_wheel.sh; built on first use, about 9
    minutes): the set-up installs the portable build on x86-64 Linux, so the venv's own
    llama_cpp is no longer native."""
    out = subprocess.run(["bash", str(ROOT / "packaging" / "llama_cpp_wheel.sh"),
                          sys.executable], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def unpacked_lib(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        z.extractall(into, [n for n in z.namelist() if n.startswith("llama_cpp/lib/")])
    return into / "llama_cpp" / "lib"


def builds(scratch: Path) -> dict[str, dict[str, str]]:
    """Name -> the environment that runs it: native (the -march=native wheel's lib folder,
    unpacked), and the installed portable build's baseline and each of its variants."""
    from backends.llamacpp.cpu_variant import BASELINE, load_variants, variants_dir

    folder = variants_dir()
    if folder is None or not (folder / f"{BASELINE}.json").is_file():
        raise SystemExit("the installed llama_cpp has no CPU variants: run "
                         "packaging/install_llama_cpp.sh (x86-64 Linux)")
    _, variants = load_variants(folder)
    found = {"native": {"LLAMA_CPP_LIB_PATH": str(unpacked_lib(native_wheel(),
                                                               scratch / "native"))}}
    for name in [BASELINE, *(v.name for v in variants)]:
        found[name] = {"EMBER_LLAMA_VARIANT": name}
    return found


def model_path(name: str) -> str:
    os.environ.setdefault("EMBER_HOME", str(TEST_HOME))
    from app.store import Store

    return str(Store().get(name).path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a model path: run one measurement
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.tokens, args.prompt, args.threads)))
        return

    model = model_path(args.model)
    sys.path.insert(0, str(ROOT))
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folders = builds(Path(scratch))
        for _ in range(args.repeat):
            for name, overrides in folders.items():
                env = {k: v for k, v in os.environ.items()
                       if k not in ("EMBER_LLAMA_VARIANT", "LLAMA_CPP_LIB_PATH")}
                env.update(overrides)
                out = subprocess.run([sys.executable, __file__, "--child", model, "--tokens",
                                      str(args.tokens), "--prompt", str(args.prompt),
                                      "--threads", str(args.threads)],
                                     env=env, check=True, capture_output=True, text=True)
                runs.setdefault(name, []).append(json.loads(out.stdout.splitlines()[-1]))

    sys.path.insert(0, str(ROOT))
    from app.hardware import cpu_name  # in the parent only: children import no more than needed

    report: dict = {"model": args.model, "cpu": cpu_name(), "cores": os.cpu_count(),
                    "threads": args.threads, "load_average": os.getloadavg(),
                    "decode_tokens": args.tokens, "prompt_tokens": args.prompt,
                    "repeat": args.repeat, "builds": {}}
    native = {k: (statistics.median(r[k] for r in runs["native"]),
                  max(r[k] for r in runs["native"])) for k in ("decode_tok_s", "prompt_tok_s")}
    for name, results in runs.items():
        entry: dict = {"lib": results[0]["lib"],
                       "isa": sorted(part.split("=")[0].strip() for part in
                                     results[0]["system_info"].split("|")
                                     if part.strip().endswith("= 1"))}
        for key in ("decode_tok_s", "prompt_tok_s"):
            values = [r[key] for r in results]
            median, best = statistics.median(values), max(values)
            entry |= {f"{key}_median": round(median, 2), f"{key}_best": round(best, 2),
                      f"{key}_runs": [round(x, 2) for x in values],
                      f"{key}_median_vs_native": round(median / native[key][0], 3),
                      f"{key}_best_vs_native": round(best / native[key][1], 3)}
        report["builds"][name] = entry
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
