"""What the logprobs tests of every local backend check
(tests/integration/test_logprobs_real_models.py for llama.cpp, test_mlx_logprobs.py,
test_cuda_logprobs.py): a request's logprobs are the model's own, i.e. the backend's
teacher-forced scoring of the same tokens (`score`) gives the same numbers."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from app.runtime import Runtime
from app.server.app import create_app
from app.store import InstalledModel, Store
from backends.base import DoneEvent, GenerationRequest, LogprobEvent
from tests.support import LOOPBACK

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


def check_chat_logprobs_through_the_worker(store: Store, model: InstalledModel,
                                           backend: str, ask_for: str | None = None) -> None:
    """A chat request with logprobs through the Runtime's worker on `backend` (`ask_for`: the
    backend the Runtime is told to use, else its own choice) and the OpenAI route, which
    answered 400 before that backend reported logprobs."""
    with Runtime(store=store, backend=ask_for) as runtime, \
            TestClient(create_app(runtime), base_url=LOOPBACK) as client:
        r = client.post("/v1/chat/completions", json={
            "model": model.ref, "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 4, "temperature": 0, "logprobs": True, "top_logprobs": 2})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert runtime.loaded()[0].backend == backend
    choice = answer["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == answer["usage"]["completion_tokens"] > 0
    assert "".join(e["token"] for e in content) == choice["message"]["content"]
    for e in content:
        assert len(e["top_logprobs"]) == 2 and e["token"] == e["top_logprobs"][0]["token"]
