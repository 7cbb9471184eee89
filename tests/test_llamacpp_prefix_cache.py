"""The llama.cpp engine's prompt cache is exact: a prompt whose prefix a slot already holds
gets bit-for-bit the logits a fresh context computes (backends/llamacpp/engine.py explains
why that needs pieces aligned to llama.cpp's 16-row kernel blocks), and a shared system
prompt shorter than 64 tokens is reused."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np
import pytest
from llama_cpp._internals import LlamaSampler

from backends.base import DoneEvent, GenerationRequest, LoadPlan, Message, SamplingParams
from backends.llamacpp import engine
from backends.llamacpp.backend import LlamaCppBackend

SYSTEM = "You are a careful senior engineer who answers with short, correct code. "
USERS = ["Reverse a string in Python." * 9, "Reverse a string in Python.",
         "Reverse a string in Python!", "Write a prime check.", "Debounce in JS.",
         "Explain this: " + "x = [i * i for i in range(10)]; " * 6,
         "Explain: " + "def f(a):\n    return a + 1\n" * 5]


@pytest.fixture
def first_logits(monkeypatch):
    """Run a request to its first token on a backend; return that token's logits and the
    prompt tokens the cache supplied."""
    seen: list[np.ndarray] = []
    sample = LlamaSampler.sample

    def recording(self, ctx, idx):  # noqa: ANN001
        n_vocab = llama_cpp.llama_vocab_n_tokens(
            llama_cpp.llama_model_get_vocab(llama_cpp.llama_get_model(ctx.ctx)))
        ptr = llama_cpp.llama_get_logits_ith(ctx.ctx, idx)
        seen.append(np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                          shape=(n_vocab,)).copy())
        return sample(self, ctx, idx)

    monkeypatch.setattr(LlamaSampler, "sample", recording)

    def run(backend: LlamaCppBackend, system: str, user: str) -> tuple[np.ndarray, int]:
        seen.clear()
        request = GenerationRequest(
            messages=(Message("system", system), Message("user", user)),
            sampling=SamplingParams(temperature=0, max_tokens=1))
        backend.submit("s", request)
        done = None
        while backend.has_work():
            done = next((e for _, e in backend.step() if isinstance(e, DoneEvent)), done)
        assert done is not None
        return seen[0], done.stats.cached_tokens

    return run


@pytest.mark.parametrize("repeats", [3, 9])  # a system prompt of about 40 and 130 tokens
def test_a_cached_prefix_gives_the_logits_of_a_fresh_context(qwen15, first_logits, repeats):
    plan = LoadPlan(context=1024, threads=2, parallel=1)
    fresh, warm = LlamaCppBackend(), LlamaCppBackend()
    fresh.load(qwen15, plan)
    warm.load(qwen15, plan)
    try:
        system_tokens = len(warm.tokenize(SYSTEM * repeats))
        reused = []
        for user in USERS:
            fresh.engine.slots[0].tokens, fresh.engine.slots[0].exact_upto = [], 0
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(fresh._ctx.ctx), True)
            expected, none_cached = first_logits(fresh, SYSTEM * repeats, user)
            got, cached = first_logits(warm, SYSTEM * repeats, user)
            assert none_cached == 0
            assert np.array_equal(got, expected), (user, cached, np.abs(got - expected).max())
            reused.append(cached)
    finally:
        fresh.unload()
        warm.unload()
    # every prompt after the first reuses the system prompt up to a piece boundary
    assert reused[0] == 0 and all(engine.boundary_floor(system_tokens) <= n
                                  == engine.boundary_floor(n) for n in reused[1:]), (
        system_tokens, reused)
