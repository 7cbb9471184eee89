"""Images on the llama.cpp backend: time to first token for one image and for the same
image again (served from the prefix cache), the tokens an image takes, and memory. Prints
JSON.

    .venv/bin/python benchmarks/vision.py [--size 896] [--rounds 5] [--model REF]

Without --model it runs the tiny vision models of tests/support/tiny_vision.py (random
weights in the real Gemma 3 and Qwen2.5-VL layouts; no real vision weights can be
downloaded on Ember's build machines), which measures Ember's path around the encoder
(decoding, pseudo-token bookkeeping, the cache) rather than a real tower's cost. With
--model, an installed model that has a projector (`ember list` shows `vision`).

Cases, each the median of --rounds, each round on a fresh image (another colour):
- `cold`: a new conversation, image and question: encode + decode of the image + text;
- `same_image_new_question`: another conversation with the same image and another
  question (the cache serves the prefix up to the question where the model's cache can
  drop a suffix: not on sliding-window models, Gemma 3 among them);
- `next_turn`: the conversation's next question (the cache serves the whole first turn).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from PIL import Image  # noqa: E402

from backends.base import (  # noqa: E402
    DoneEvent,
    GenerationRequest,
    LoadPlan,
    Message,
    SamplingParams,
)
from backends.llamacpp.backend import LlamaCppBackend  # noqa: E402
from backends.media import MEDIA_MARKER, Media, decode_image  # noqa: E402
from backends.prompt import run_alone  # noqa: E402


def picture(seed: int, size: int) -> bytes:
    img = Image.new("RGB", (size, size))
    for y in range(0, size, 32):
        shade = (seed * 53 + y) % 256
        img.paste((shade, (shade * 7) % 256, 255 - shade), (0, y, size, y + 32))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def run(backend: LlamaCppBackend, messages: tuple[Message, ...]) -> DoneEvent:
    request = GenerationRequest(messages=messages, speculative=None,
                                sampling=SamplingParams(temperature=0.0, max_tokens=8))
    request.validate()
    *_, last = run_alone(backend, request)
    assert isinstance(last, DoneEvent), last
    return last


def measure(backend: LlamaCppBackend, size: int, rounds: int) -> dict:
    cases: dict[str, list[DoneEvent]] = {"cold": [], "same_image_new_question": [],
                                         "next_turn": []}
    for r in range(rounds):
        shot: Media = decode_image(picture(1000 + r, size))
        first_q = Message("user", MEDIA_MARKER + "What is in this picture?", media=(shot,))
        cold = run(backend, (first_q,))
        cases["cold"].append(cold)
        cases["same_image_new_question"].append(run(backend, (
            Message("user", MEDIA_MARKER + "Which colours does it have?", media=(shot,)),)))
        cases["next_turn"].append(run(backend, (first_q, Message("assistant", cold.text),
                                                Message("user", "And its shapes?"))))
    out = {}
    for name, done in cases.items():
        out[name] = {
            "ttft_ms_median": round(statistics.median(d.stats.ttft_s for d in done) * 1000, 1),
            "prompt_tokens": done[0].stats.prompt_tokens,
            "cached_tokens_median": statistics.median(d.stats.cached_tokens for d in done),
            "media_tokens": done[0].stats.media_tokens,
        }
    cold_ms = out["cold"]["ttft_ms_median"]
    for name in ("same_image_new_question", "next_turn"):
        out[name]["ttft_over_cold"] = round(out[name]["ttft_ms_median"] / cold_ms, 3)
    return out


class Files:
    def __init__(self, path: Path, projector: Path, ref: str, arch: str) -> None:
        self.path, self.projector, self.ref, self.architecture = path, projector, ref, arch
        self.id, self.format, self.context_length = ref.split(":")[0], "gguf", 4096


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=896, help="image side in pixels")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", help="an installed model with a projector")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    plan = LoadPlan(context=4096, threads=args.threads, parallel=2, batch=512)
    models: list[Files] = []
    tmp = tempfile.TemporaryDirectory()
    if args.model:
        from app.store import Store

        installed = Store().get(args.model)
        if installed.projector is None:
            sys.exit(f"{installed.ref} has no projector: it reads text only")
        models.append(Files(installed.path, installed.projector, installed.ref,
                            installed.architecture))
    else:
        from tests.support.tiny_vision import write_tiny_gemma3_vision, write_tiny_qwen2vl_vision

        for write in (write_tiny_gemma3_vision, write_tiny_qwen2vl_vision):
            tiny = write(Path(tmp.name) / write.__name__)
            models.append(Files(tiny.model, tiny.projector, f"tiny-{tiny.family}:f32",
                                tiny.family))
    results = []
    proc = psutil.Process()
    for files in models:
        before = proc.memory_info().rss
        backend = LlamaCppBackend()
        started = time.perf_counter()
        backend.load(files, plan)
        load_s = time.perf_counter() - started
        loaded = proc.memory_info().rss
        cases = measure(backend, args.size, args.rounds)
        results.append({
            "model": files.ref, "real_weights": bool(args.model),
            "image": f"{args.size}x{args.size} PNG", "load_s": round(load_s, 3),
            "rss_after_load_mib": round((loaded - before) / 2**20, 1),
            "rss_peak_growth_mib": round((proc.memory_info().rss - before) / 2**20, 1),
            **cases})
        backend.unload()
    print(json.dumps({
        "benchmark": "vision", "threads": args.threads, "rounds": args.rounds,
        "cpu": _cpu(), "results": results}, indent=2))
    tmp.cleanup()


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


if __name__ == "__main__":
    main()
