"""The llama.cpp backend with a q8_0 KV cache (flash attention on): it loads, and its greedy
answer is the f16 cache's up to near-ties (tests/support/agreement.py): compared by exact text,
the two parted at the sixth word on an AVX2-only CPU and later on AVX-512 ones (issue 36)."""

from __future__ import annotations

import pytest

from backends.base import DoneEvent, GenerationRequest, LoadPlan, Message, SamplingParams
from backends.errors import BackendError
from backends.llamacpp.backend import LlamaCppBackend
from tests.support.agreement import forced_through

QUESTION = GenerationRequest(
    messages=(Message("user", "Write a Python function that returns the sum of a list of "
                              "numbers, with a docstring and an example."),),
    sampling=SamplingParams(temperature=0, max_tokens=160), logprobs=0)


def loaded(model, kv_cache: str) -> LlamaCppBackend:
    backend = LlamaCppBackend()
    backend.load(model, LoadPlan(context=2048, threads=2, kv_cache=kv_cache))
    return backend


def test_a_q8_0_kv_cache_answers_as_f16_does(qwen):
    q8 = loaded(qwen, "q8_0")
    try:
        done = list(q8.generate(QUESTION))[-1]
        prompt, _, _ = q8.prompt_tokens(QUESTION)
    finally:
        q8.unload()
    assert isinstance(done, DoneEvent) and done.stats.completion_tokens > 100
    assert "def " in done.text
    answer = [e.id for e in done.logprobs]
    f16 = loaded(qwen, "f16")
    try:
        agreement = forced_through(f16, prompt + answer, len(prompt))
        garbled = forced_through(f16, prompt + answer[1:], len(prompt))  # one token dropped
    finally:
        f16.unload()
    agreement.check()
    with pytest.raises(AssertionError, match="worst gap"):  # the comparison can fail
        garbled.check()


def test_an_unknown_kv_cache_type_is_refused_before_loading(qwen):
    with pytest.raises(BackendError, match="KV cache type 'q4_0': the llamacpp backend takes "
                                           "f16 or q8_0"):
        LlamaCppBackend().load(qwen, LoadPlan(context=2048, threads=2, kv_cache="q4_0"))
