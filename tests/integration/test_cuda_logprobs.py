"""Log-probabilities of generated tokens on the cuda backend (CPU, float32), with the real
Qwen2.5-Coder models: they are the model's own raw distribution (teacher-forced scoring of
the same tokens gives the same numbers, a repeat penalty notwithstanding). With a draft
model they are the target model's: tests/integration/test_cuda_speculative_real_pair.py checks them
beside the answer."""

from __future__ import annotations

import pytest

from backends.base import (
    GenerationRequest,
    LoadPlan,
    LogprobEvent,
    Message,
    SamplingParams,
)
from backends.cuda import CudaBackend
from tests.support.logprobs import (
    check_against_scoring,
    check_chat_logprobs_through_the_worker,
    generate,
    teacher_forced,
)

pytestmark = pytest.mark.slow
HAIKU = (Message("user", "Write a haiku about a rusty bicycle."),)


@pytest.fixture(scope="module")
def qwen_cuda(qwen) -> CudaBackend:
    backend = CudaBackend(max_seqs=2)
    backend.load(qwen, LoadPlan(context=1024, threads=2, parallel=2, batch=256))
    yield backend
    backend.unload()


@pytest.mark.parametrize("sampling", [
    SamplingParams(temperature=0.0, max_tokens=24),
    # the penalty shapes the draw, not the logprobs: they stay the raw distribution's
    SamplingParams(temperature=0.9, seed=7, max_tokens=24, repeat_penalty=1.3),
], ids=["greedy", "sampled-with-penalty"])
def test_logprobs_sum_to_the_teacher_forced_log_likelihood(qwen_cuda, sampling):
    request = GenerationRequest(messages=HAIKU, sampling=sampling, logprobs=3)
    done = generate(qwen_cuda, request)
    check_against_scoring(done, teacher_forced(qwen_cuda, request, done), n_top=3,
                          greedy=sampling.temperature == 0)


def test_a_request_without_logprobs_gets_none(qwen_cuda):
    events = list(qwen_cuda.generate(GenerationRequest(
        messages=HAIKU, sampling=SamplingParams(temperature=0.0, max_tokens=8))))
    assert not any(isinstance(e, LogprobEvent) for e in events)
    assert events[-1].logprobs == ()


def test_openai_chat_logprobs_come_from_the_cuda_worker(store, qwen):
    """Through the Runtime's worker and the OpenAI route (which answered 400 before this
    backend reported logprobs)."""
    check_chat_logprobs_through_the_worker(store, qwen, "cuda", ask_for="cuda")
