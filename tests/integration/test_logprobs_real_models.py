"""Log-probabilities of generated tokens on the llama.cpp backend, with the real
Qwen2.5-Coder models: they are the model's own (teacher-forced scoring of the same tokens
gives the same numbers), with speculation they are the target model's, and the OpenAI and
Ollama wires carry them as their clients read them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import httpx
import ollama
import openai
import pytest

from app.runtime import Runtime
from backends.base import (
    GenerationRequest,
    LoadPlan,
    LogprobEvent,
    Message,
    SamplingParams,
    SpeculativeParams,
)
from backends.llamacpp.backend import LlamaCppBackend
from tests.support.live_server import live_server
from tests.support.logprobs import check_against_scoring, generate, teacher_forced

PLAN = LoadPlan(context=1024, threads=2, parallel=1)
HAIKU = (Message("user", "Write a haiku about a rusty bicycle."),)
CODE = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(8))
EDIT = (Message("user", f"Rename x to value in this code and print all of it:\n{CODE}"),)


def fresh(model) -> LlamaCppBackend:
    """A backend with an empty cache: a reused prefix was evaluated in another batch shape,
    whose rounding moves logits (docs/notes/llamacpp-engine.md)."""
    backend = LlamaCppBackend()
    backend.load(model, PLAN)
    return backend


@pytest.mark.parametrize("sampling", [
    SamplingParams(temperature=0.0, max_tokens=24),
    SamplingParams(temperature=0.9, seed=7, max_tokens=24),
], ids=["greedy", "sampled"])
def test_logprobs_sum_to_the_teacher_forced_log_likelihood(qwen, sampling):
    backend = fresh(qwen)
    try:
        request = GenerationRequest(messages=HAIKU, sampling=sampling, logprobs=3)
        done = generate(backend, request)
        check_against_scoring(done, teacher_forced(backend, request, done), n_top=3,
                              greedy=sampling.temperature == 0)
    finally:
        backend.unload()


def test_speculative_logprobs_are_the_target_models(qwen, qwen15):
    """A 0.5B draft proposes for the 1.5B: the logprobs are the 1.5B's, up to the rounding of
    the verification batch's shape, and far from the draft model's own."""
    target, draft = fresh(qwen15), fresh(qwen)
    try:
        request = GenerationRequest(
            messages=EDIT, sampling=SamplingParams(temperature=0.0, max_tokens=32), logprobs=1,
            speculative=SpeculativeParams(method="draft", draft_model=qwen.ref,
                                          draft_path=str(qwen.path), max_draft=4,
                                          adaptive=False))
        done = generate(target, request)
        assert done.stats.accepted_tokens > 8  # most tokens came from verified proposals
        by_target = teacher_forced(target, request, done)
        by_draft = teacher_forced(draft, request, done)
        got = [e.logprob for e in done.logprobs]
        assert max(abs(a - b) for a, b in zip(got, by_target, strict=True)) < 0.25
        assert abs(sum(got) - sum(by_target)) < 0.5
        assert abs(sum(got) - sum(by_draft)) > 2.0, (sum(got), sum(by_draft))
    finally:
        target.unload()
        draft.unload()


def test_a_request_without_logprobs_gets_none(qwen):
    backend = fresh(qwen)
    try:
        events = list(backend.generate(GenerationRequest(
            messages=HAIKU, sampling=SamplingParams(temperature=0.0, max_tokens=8))))
        assert not any(isinstance(e, LogprobEvent) for e in events)
        assert events[-1].logprobs == ()
    finally:
        backend.unload()


# ---------------------------------------------------------------------------- the wire
@pytest.fixture(scope="module")
def server(store, qwen) -> Iterator[tuple[str, Runtime]]:
    with live_server(store) as s:
        yield s


@pytest.fixture(scope="module")
def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0)


ASK = [{"role": "user", "content": "Name three colours, comma separated."}]


def test_chat_logprobs_streamed_and_whole_agree(oai, qwen):
    whole = oai.chat.completions.create(model=qwen.ref, messages=ASK, temperature=0,
                                        max_tokens=12, logprobs=True, top_logprobs=2)
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens
    assert "".join(e.token for e in content) == whole.choices[0].message.content
    for e in content:
        assert bytes(e.bytes).decode() == e.token and len(e.top_logprobs) == 2
        assert e.token == e.top_logprobs[0].token and e.logprob == e.top_logprobs[0].logprob
    streamed = []
    for chunk in oai.chat.completions.create(model=qwen.ref, messages=ASK, temperature=0,
                                             max_tokens=12, logprobs=True, top_logprobs=2,
                                             stream=True):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed += chunk.choices[0].logprobs.content
    assert [(e.token, round(e.logprob, 6)) for e in streamed] == [
        (e.token, round(e.logprob, 6)) for e in content]


def test_chat_without_logprobs_has_null_logprobs(oai, qwen):
    answer = oai.chat.completions.create(model=qwen.ref, messages=ASK, temperature=0,
                                         max_tokens=4)
    assert answer.choices[0].logprobs is None


def test_legacy_completions_logprobs(server, qwen):
    url = server[0]
    body = {"model": qwen.ref, "prompt": "def add(a, b):\n", "temperature": 0,
            "max_tokens": 10, "logprobs": 3}
    whole = httpx.post(url + "/v1/completions", json=body, timeout=120).json()["choices"][0]
    lp = whole["logprobs"]
    assert "".join(lp["tokens"]) == whole["text"]
    assert len(lp["token_logprobs"]) == len(lp["tokens"]) == len(lp["top_logprobs"]) == 10
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"],
                                   strict=True):
        assert 1 <= len(top) <= 3 and max(top.values()) == logprob and top[token] == logprob
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    tokens: list[str] = []
    for chunk in client.completions.create(model=qwen.ref, prompt=body["prompt"],
                                           temperature=0, max_tokens=10, logprobs=3,
                                           stream=True):
        if chunk.choices[0].logprobs:
            tokens += chunk.choices[0].logprobs.tokens
    assert tokens == lp["tokens"]


def test_ollama_chat_and_generate_logprobs(server, qwen):
    client = ollama.Client(host=server[0])
    whole = client.chat(model=qwen.ref, messages=ASK, logprobs=True, top_logprobs=2,
                        options={"temperature": 0, "num_predict": 8}, stream=False)
    assert 0 < len(whole.logprobs) == whole.eval_count <= 8
    assert "".join(e.token for e in whole.logprobs) == whole.message.content
    assert all(len(e.top_logprobs) == 2 for e in whole.logprobs)
    streamed = [e for part in client.chat(model=qwen.ref, messages=ASK, logprobs=True,
                                          options={"temperature": 0, "num_predict": 8},
                                          stream=True)
                for e in part.logprobs or ()]
    assert [e.token for e in streamed] == [e.token for e in whole.logprobs]
    generated = client.generate(model=qwen.ref, prompt="Say hi.", logprobs=True,
                                options={"temperature": 0, "num_predict": 4})
    assert len(generated.logprobs) == generated.eval_count


@pytest.mark.parametrize(("path", "body", "message"), [
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs needs logprobs: true"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/completions", {"logprobs": -1}, "logprobs"),
    ("/api/chat", {"top_logprobs": 3}, "top_logprobs needs logprobs: true"),
])
def test_bad_logprobs_settings_are_a_clear_400(server, qwen, path, body, message):
    base = {"model": qwen.ref, "max_tokens": 2, "stream": False}
    base |= {"prompt": "hi"} if path == "/v1/completions" else {"messages": ASK}
    r = httpx.post(server[0] + path, json=base | body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert message in (error if isinstance(error, str) else error["message"] + str(
        error["param"]))


def test_generation_request_bounds_top_logprobs():
    bad = GenerationRequest(messages=HAIKU, logprobs=21)
    with pytest.raises(Exception, match="top_logprobs must be between 0 and 20"):
        bad.validate()
    replace(bad, logprobs=20).validate()
