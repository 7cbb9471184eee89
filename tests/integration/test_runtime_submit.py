"""One Runtime entry per request (Runtime.submit): an API request resolves its model once,
and its prompt is rendered and tokenized once, by the generation's own first step in the
worker, which answers Admitted before any token. The real server app, Runtime and worker on
the real 0.5B model."""

from __future__ import annotations

import httpx
import pytest

from app.runtime.worker_handle import Worker
from backends.base import GenerationRequest, LoadPlan, Message, SamplingParams
from backends.llamacpp import LlamaCppBackend
from tests.support.live_server import live_server

CHAT = {"max_tokens": 4, "temperature": 0,
        "messages": [{"role": "system", "content": "You answer in one word."},
                     {"role": "user", "content": "What is the capital of France?"}]}


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the messages sent down the workers' pipes from now on."""
    names: list[str] = []
    real_send = Worker.send

    def recording_send(self, msg):
        names.append(type(msg).__name__)
        return real_send(self, msg)

    monkeypatch.setattr(Worker, "send", recording_send)
    return names


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat", "/v1/messages"])
def test_an_api_request_resolves_its_model_once_and_sends_no_prompt_count(
        store, qwen, path, sent, monkeypatch: pytest.MonkeyPatch):
    resolved: list[str] = []
    real_get = store.get

    def counting_get(name, *args, **kwargs):
        resolved.append(name)
        return real_get(name, *args, **kwargs)

    monkeypatch.setattr(store, "get", counting_get)
    with live_server(store, parallel=1) as (url, runtime):
        body = CHAT | {"model": qwen.ref} | ({"stream": False} if path == "/api/chat" else {})
        r = httpx.post(url + path, json=body, timeout=600)
        assert r.status_code == 200, r.text
        assert resolved == [qwen.ref]  # the request's load included: one Store.get
        # the pipe carried one generation and nothing that counts or tokenizes a prompt
        assert [m for m in sent if m != "Shutdown"] == ["Generate"]
        request = GenerationRequest(messages=tuple(Message(m["role"], m["content"])
                                                   for m in CHAT["messages"]),
                                    sampling=SamplingParams(temperature=0, max_tokens=4))
        counted = runtime.count_prompt_tokens(qwen.ref, request)
    usage = r.json().get("usage") or {}
    reported = (usage.get("prompt_tokens") or usage.get("input_tokens")
                or r.json().get("prompt_eval_count"))
    assert reported == counted


def test_submit_is_admitted_with_the_prompt_its_generation_runs(runtime, qwen):
    request = GenerationRequest(messages=(Message("user", "Say yes."),),
                                sampling=SamplingParams(temperature=0, max_tokens=3))
    generation = runtime.submit(qwen.ref, request)
    admitted = generation.admitted
    _, stats = generation.result()
    assert admitted is not None and admitted.prompt_tokens == stats.prompt_tokens > 5


def test_a_generation_tokenizes_its_prompt_once(qwen, monkeypatch: pytest.MonkeyPatch):
    """The llama.cpp backend keeps no memo of its last prompt: a request's generation
    renders and tokenizes it once (submit), and a second count tokenizes again."""
    backend = LlamaCppBackend()
    backend.load(qwen, LoadPlan(context=1024, threads=2))
    try:
        model = backend._loaded()
        calls: list[bytes] = []
        real_tokenize = model.tokenize

        def counting(text: bytes, *args, **kwargs):
            calls.append(text)
            return real_tokenize(text, *args, **kwargs)

        monkeypatch.setattr(model, "tokenize", counting)
        request = GenerationRequest(messages=(Message("user", "Say yes."),),
                                    sampling=SamplingParams(temperature=0, max_tokens=3))
        events = list(backend.generate(request))
        assert len(calls) == 1, calls
        assert events[-1].stats.prompt_tokens == backend.count_prompt_tokens(request)
        assert len(calls) == 2 and calls[0] == calls[1]  # counted again: no memo
    finally:
        backend.unload()


def test_a_chat_turn_sends_one_generation_and_no_prompt_count(runtime, qwen, tmp_path, sent):
    """The window's and `ember chat`'s turn (app.chat.ChatSession) on the real model: one
    Generate through the worker's pipe, no separate count of the prompt; the context meter's
    count is the one the generation was admitted with."""
    from app.chat.events import AnswerDone, PromptCounted
    from app.chat.request import TurnOptions
    from app.chat.session import ChatSession
    from app.history import History

    history = History(tmp_path / "history.db")
    conversation = history.create(model=qwen.ref)
    session = ChatSession(history, runtime, conversation.id, qwen.ref,
                          TurnOptions(SamplingParams(temperature=0, max_tokens=4), None))
    events: list = []
    session.send("Say yes.", on_event=events.append, approve=lambda asked: "deny")
    done = [e for e in events if isinstance(e, AnswerDone)]
    counted = [e for e in events if isinstance(e, PromptCounted)]
    assert done and done[0].status == "complete", events
    assert [m for m in sent if m != "Shutdown"] == ["Generate"]
    assert len(counted) == 1 and counted[0].tokens == done[0].stats["prompt_tokens"] > 5


def test_a_chat_longer_than_the_context_drops_its_oldest_turns_and_keeps_them_saved(
        runtime, qwen, tmp_path):
    """The chat session's context policy on the real model (its context 4096 here): a
    conversation that no longer fits is answered with its earliest turns dropped, the front
    end is told so, and history.db still holds every turn."""
    from app.chat.events import AnswerDone, Notice
    from app.chat.policy import TRUNCATED_NOTE
    from app.chat.request import TurnOptions
    from app.chat.session import ChatSession
    from app.history import History

    history = History(tmp_path / "history.db")
    conversation = history.create(model=qwen.ref, system_prompt="Answer in one word.")
    filler = " ".join(f"word{i}" for i in range(900))  # about 2,700 tokens a turn
    for i in range(3):
        history.add_message(conversation.id, "user", f"Turn {i}: {filler}")
        history.add_message(conversation.id, "assistant", "Noted.")
    before = len(history.messages(conversation.id))
    session = ChatSession(history, runtime, conversation.id, qwen.ref,
                          TurnOptions(SamplingParams(temperature=0, max_tokens=4), None))
    events: list = []
    session.send("Say yes.", on_event=events.append)
    done = [e for e in events if isinstance(e, AnswerDone)]
    assert done and done[0].status == "complete", events
    assert done[0].stats["truncated"] and done[0].stats["prompt_tokens"] < 4096
    assert [e.text for e in events if isinstance(e, Notice) and e.kind == "truncated"] == [
        TRUNCATED_NOTE]
    assert len(history.messages(conversation.id)) == before + 2  # nothing lost, Q and A added
