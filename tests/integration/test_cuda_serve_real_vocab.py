"""A random-weights model with Llama 3's real vocabulary through `ember serve --backend cuda`
in a child process, driven with the OpenAI client (benchmarks/cuda_serve_real_vocab.py, the
GPU checks' serve step, at its tiny CPU shape): streaming, concurrent requests, a prefix
cache hit in usage, and prompt lookup with the same greedy answer as without."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO
from tests.support.llama_sdist import vocab

pytestmark = pytest.mark.slow


def test_real_vocabulary_model_serves_through_ember_serve_on_cuda(tmp_path):
    r = subprocess.run([sys.executable, "benchmarks/cuda_serve_real_vocab.py", "--shape", "tiny",
                        "--vocab", str(vocab("llama-bpe")), "--tokens", "8",
                        "--concurrent", "3", "--work", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    out = json.loads(r.stdout)
    assert out["model"] == "random-tiny-real-vocab" and out["vocab"] == "ggml-vocab-llama-bpe.gguf"
    assert out["streaming"]["chunks"] > 1 and out["streaming"]["completion_tokens"] == 8
    concurrent = out["concurrent"]
    assert concurrent["requests"] == 3 and concurrent["completion_tokens"] == 24
    assert concurrent["same_as_alone"]  # greedy: batching with others changes no answer
    cache = out["prefix_cache"]
    assert 0 < cache["cached_tokens"] < cache["prompt_tokens"] and cache["same_answer"]
    assert out["speculation"]["identical"] and out["speculation"]["method"] == "lookup"
    assert out["backend"]["loaded"][0]["backend"] == "cuda"
    assert out["ok"]
    served = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in served
