"""The llama.cpp backend with a q8_0 KV cache (flash attention on): it loads, and its greedy
answer starts as the f16 cache's does."""

from __future__ import annotations

import pytest

from backends.base import DoneEvent, GenerationRequest, LoadPlan, Message, SamplingParams
from backends.errors import BackendError
from backends.llamacpp.backend import LlamaCppBackend

QUESTION = GenerationRequest(
    messages=(Message("user", "Write a Python function that returns the sum of a list of "
                              "numbers."),),
    sampling=SamplingParams(temperature=0, max_tokens=24))


def greedy_answer(model, kv_cache: str) -> str:
    backend = LlamaCppBackend()
    backend.load(model, LoadPlan(context=2048, threads=2, kv_cache=kv_cache))
    try:
        events = list(backend.generate(QUESTION))
    finally:
        backend.unload()
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.stats.completion_tokens == 24
    return done.text


def test_a_q8_0_kv_cache_answers_as_f16_does(qwen):
    f16, q8 = greedy_answer(qwen, "f16"), greedy_answer(qwen, "q8_0")
    assert "def " in q8
    assert q8.split()[:6] == f16.split()[:6], (f16, q8)


def test_an_unknown_kv_cache_type_is_refused_before_loading(qwen):
    with pytest.raises(BackendError, match="KV cache type 'q4_0': the llamacpp backend takes "
                                           "f16 or q8_0"):
        LlamaCppBackend().load(qwen, LoadPlan(context=2048, threads=2, kv_cache="q4_0"))
