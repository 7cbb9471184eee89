"""Log-probabilities of generated tokens on the mlx backend (mlx[cpu]), with Qwen2.5-Coder
converted to MLX: they are the model's own raw distribution (teacher-forced scoring of the
same tokens gives the same numbers, a repeat penalty notwithstanding), and a speculative
request's come from the model's verification rows (with a draft model: the target's, not
the draft model's, in tests/integration/test_mlx_speculative_real_pair.py, beside the answer's
check).

MLX on this CPU is slow (about a token a second for the 0.5B, a prompt token costing as much
as a generated one): short prompts, 16 tokens, one loaded backend."""

from __future__ import annotations

import pytest

from backends.base import (
    GenerationRequest,
    LoadPlan,
    LogprobEvent,
    SamplingParams,
    SpeculativeParams,
)
from backends.mlx.backend import MlxBackend
from tests.support.logprobs import (
    check_against_scoring,
    check_chat_logprobs_through_the_worker,
    generate,
    teacher_forced,
)

TOKENS = 16
REPEATS = "a = [1, 2, 3]\nb = [1, 2, 3]\nc = [1, 2,"  # prompt lookup finds what follows


@pytest.fixture(scope="module")
def backend(qwen_mlx):
    b = MlxBackend()
    b.load(qwen_mlx, LoadPlan(context=256, threads=2, parallel=2, batch=64, unpack_weights=True))
    yield b
    b.unload()


@pytest.mark.parametrize("sampling", [
    SamplingParams(temperature=0.0, max_tokens=TOKENS),
    # the penalty is a logits processor after ours: the logprobs stay the raw distribution's
    SamplingParams(temperature=0.9, seed=7, max_tokens=TOKENS, repeat_penalty=1.3),
], ids=["greedy", "sampled-with-penalty"])
def test_logprobs_sum_to_the_teacher_forced_log_likelihood(backend, sampling):
    request = GenerationRequest(prompt="def fibonacci(n):", sampling=sampling, logprobs=3)
    done = generate(backend, request)
    check_against_scoring(done, teacher_forced(backend, request, done), n_top=3,
                          greedy=sampling.temperature == 0)


def test_speculative_logprobs_come_from_the_verification_rows(backend):
    """Prompt lookup proposes, the model verifies several tokens in one pass: each token's
    logprob is from its own row of that pass (the model's, as a one-row step gives it)."""
    request = GenerationRequest(
        prompt=REPEATS, sampling=SamplingParams(temperature=0.0, max_tokens=TOKENS),
        logprobs=2, speculative=SpeculativeParams(method="lookup", max_draft=3))
    done = generate(backend, request)
    assert done.stats.accepted_tokens >= 3  # some tokens came from verified proposals
    check_against_scoring(done, teacher_forced(backend, request, done), n_top=2, greedy=True)


def test_a_request_without_logprobs_gets_none(backend):
    events = list(backend.generate(GenerationRequest(
        prompt="def add(a, b):", sampling=SamplingParams(temperature=0.0, max_tokens=4))))
    assert not any(isinstance(e, LogprobEvent) for e in events)
    assert events[-1].logprobs == ()


def test_openai_chat_logprobs_come_from_the_mlx_worker(store, qwen_mlx):
    """Through the Runtime's worker and the OpenAI route (which answered 400 before this
    backend reported logprobs)."""
    check_chat_logprobs_through_the_worker(store, qwen_mlx, "mlx")
