"""What the logprobs tests of every local backend check (tests/integration/test_logprobs.py
for llama.cpp, test_mlx_logprobs.py, test_cuda_logprobs.py): a request's logprobs are the
model's own, i.e. the backend's teacher-forced scoring of the same tokens (`score`) gives the
same numbers."""

from __future__ import annotations

from typing import Any

from backends.base import DoneEvent, GenerationRequest, LogprobEvent

TOLERANCE = 1e-3  # issue 20: within 1e-3 of the teacher-forced log-likelihood


def generate(backend: Any, request: GenerationRequest) -> DoneEvent:
    """The request's DoneEvent, after checking that one LogprobEvent came per token, in the
    order DoneEvent lists them."""
    events = list(backend.generate(request))
    done = events[-1]
    assert isinstance(done, DoneEvent), done
    streamed = [e.entry for e in events if isinstance(e, LogprobEvent)]
    assert tuple(streamed) == done.logprobs  # one event per token, in order
    assert len(done.logprobs) == done.stats.completion_tokens
    return done


def teacher_forced(backend: Any, request: GenerationRequest, done: DoneEvent) -> list[float]:
    """The backend's own log-probabilities of the answer's tokens after the prompt."""
    prompt, _, _ = backend.prompt_tokens(request)
    return backend.score(prompt + [e.id for e in done.logprobs], len(prompt))


def check_against_scoring(done: DoneEvent, scored: list[float], n_top: int,
                          greedy: bool) -> None:
    """Sum and every token within TOLERANCE of the teacher-forced scores; `n_top` sorted
    alternatives each; a greedy token is its position's most likely; the tokens' bytes are
    the answer's text."""
    total = sum(e.logprob for e in done.logprobs)
    assert abs(total - sum(scored)) < TOLERANCE, (total, sum(scored))
    for entry, alone in zip(done.logprobs, scored, strict=True):
        assert abs(entry.logprob - alone) < TOLERANCE, (entry, alone)
        assert entry.logprob <= 0 and len(entry.top) == n_top
        assert [t.logprob for t in entry.top] == sorted(
            (t.logprob for t in entry.top), reverse=True)
        if greedy:  # greedy takes the most likely token
            assert entry.token == entry.top[0].token and entry.logprob == entry.top[0].logprob
    assert b"".join(e.bytes for e in done.logprobs).decode() == done.text
