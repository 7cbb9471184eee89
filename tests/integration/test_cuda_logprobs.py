"""Log-probabilities of generated tokens on the cuda backend (CPU, float32), with the real
Qwen2.5-Coder models: they are the model's own raw distribution (teacher-forced scoring of
the same tokens gives the same numbers, a repeat penalty notwithstanding), and with
speculation they are the target model's."""

from __future__ import annotations

import pytest

from backends.base import (
    GenerationRequest,
    LoadPlan,
    LogprobEvent,
    Message,
    SamplingParams,
    SpeculativeParams,
)
from backends.cuda import CudaBackend
from tests.support.logprobs import (
    TOLERANCE,
    check_against_scoring,
    check_chat_logprobs_through_the_worker,
    generate,
    teacher_forced,
)

pytestmark = pytest.mark.slow
HAIKU = (Message("user", "Write a haiku about a rusty bicycle."),)
CODE = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(4))
EDIT = (Message("user", f"Rename x to value in this code and print all of it:\n{CODE}"),)


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


def test_speculative_logprobs_are_the_target_models(qwen15, qwen, qwen_cuda):
    """The 0.5B proposes for the 1.5B: the logprobs are the 1.5B's (its verification rows,
    in float32 as close to its one-row scores as plain decoding), far from the 0.5B's."""
    target = CudaBackend(max_seqs=1, adaptive_speculation=False)
    target.load(qwen15, LoadPlan(context=512, threads=2, parallel=1, batch=256))
    try:
        request = GenerationRequest(
            messages=EDIT, sampling=SamplingParams(temperature=0.0, max_tokens=24), logprobs=1,
            speculative=SpeculativeParams(method="draft", draft_model=qwen.ref,
                                          draft_path=str(qwen.path), max_draft=4))
        done = generate(target, request)
        assert done.stats.accepted_tokens > 8  # most tokens came from verified proposals
        check_against_scoring(done, teacher_forced(target, request, done), n_top=1,
                              greedy=True)
        by_draft = teacher_forced(qwen_cuda, request, done)
        got = sum(e.logprob for e in done.logprobs)
        assert abs(got - sum(by_draft)) > 100 * TOLERANCE, (got, sum(by_draft))
    finally:
        target.unload()


def test_a_request_without_logprobs_gets_none(qwen_cuda):
    events = list(qwen_cuda.generate(GenerationRequest(
        messages=HAIKU, sampling=SamplingParams(temperature=0.0, max_tokens=8))))
    assert not any(isinstance(e, LogprobEvent) for e in events)
    assert events[-1].logprobs == ()


def test_openai_chat_logprobs_come_from_the_cuda_worker(store, qwen):
    """Through the Runtime's worker and the OpenAI route (which answered 400 before this
    backend reported logprobs)."""
    check_chat_logprobs_through_the_worker(store, qwen, "cuda", ask_for="cuda")
