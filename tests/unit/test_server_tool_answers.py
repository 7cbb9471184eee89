"""What the OpenAI and Ollama routes answer when the model thinks and calls tools: the
shapes of docs/wire-formats.md C.2-C.4, read back through the official openai and
ollama clients, for answers a test scripts as a backend's events (tests.support.fake_runtime).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import ollama
import openai
import pytest

from backends.base import ReasoningEvent, TokenEvent, ToolCallEvent
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served
from tests.support.streams import openai_stream

USER = [{"role": "user", "content": "Weather in Paris and the time?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "get_time"}}]
THINK_THEN_TWO_CALLS = [
    ReasoningEvent("The user wants"), ReasoningEvent(" two things."),
    ToolCallEvent(0, id="call_a1", name="get_weather"),
    ToolCallEvent(0, '{"city": '), ToolCallEvent(0, '"Paris"}'),
    ToolCallEvent(1, '{}', id="call_b2", name="get_time"),
]


@pytest.fixture
def fake() -> ScriptedRuntime:
    return ScriptedRuntime(script=list(THINK_THEN_TWO_CALLS))


def sse(client, body: dict) -> list[dict]:
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER,
                                                   "stream": True, **body})
    assert r.status_code == 200, r.text
    lines = [ln.removeprefix("data: ") for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def ndjson(client, path: str, body: dict) -> list[dict]:
    r = client.post(path, json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return [json.loads(ln) for ln in r.text.splitlines()]


@pytest.fixture
def oai(fake) -> Iterator[openai.OpenAI]:
    with served(fake) as client:
        yield openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="x", http_client=client,
                            max_retries=0)


@pytest.fixture
def oll(fake) -> Iterator[ollama.Client]:
    with served(fake) as client:
        oll = ollama.Client(host="http://127.0.0.1")
        oll._client = client  # the in-process app instead of a socket
        yield oll


# ---------------------------------------------------------------------------- OpenAI
def test_openai_answer_with_thinking_and_two_calls(oai):
    r = oai.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert [(c.id, c.type, c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls] == [
        ("call_a1", "function", "get_weather", {"city": "Paris"}),
        ("call_b2", "function", "get_time", {})]
    assert choice.message.model_extra["reasoning_content"] == "The user wants two things."
    assert "reasoning" not in choice.message.model_extra  # one name unless asked for both
    assert r.usage.completion_tokens_details.reasoning_tokens == 2


def test_openai_raw_answer_has_null_content_and_no_empty_fields(fake):
    with served(fake) as client:
        r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
    message = r.json()["choices"][0]["message"]
    assert message["content"] is None and set(message) == {
        "role", "content", "reasoning_content", "tool_calls"}
    fake.script = [TokenEvent("Hello")]
    with served(fake) as client:
        r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
    assert r.json()["choices"][0] == {"index": 0, "finish_reason": "stop", "logprobs": None,
                                      "message": {"role": "assistant", "content": "Hello"}}


@pytest.mark.parametrize(("field", "keys"), [
    ("reasoning", {"reasoning"}), ("both", {"reasoning", "reasoning_content"})])
def test_reasoning_field_option_per_request_and_per_server(fake, field, keys):
    fake.script = [ReasoningEvent("hm"), TokenEvent("Hi")]
    with served(fake) as client:
        r = client.post("/v1/chat/completions",
                        json={"model": MODEL, "messages": USER, "reasoning_field": field})
        streamed = sse(client, {"reasoning_field": field})
    message = r.json()["choices"][0]["message"]
    assert {k for k in message if k.startswith("reasoning")} == keys
    assert all(message[k] == "hm" for k in keys)
    assert streamed[1]["choices"][0]["delta"] == dict.fromkeys(keys, "hm")
    with served(fake, reasoning_field=field) as client:
        message = client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": USER}).json()["choices"][0]["message"]
    assert {k for k in message if k.startswith("reasoning")} == keys


def test_openai_stream_sends_one_kind_per_delta_and_call_headers_once(fake):
    fake.script = [ReasoningEvent("Think."), TokenEvent("Let me check."),
                   *THINK_THEN_TWO_CALLS[2:]]
    with served(fake) as client:
        chunks = sse(client, {"tools": TOOLS, "stream_options": {"include_usage": True}})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "Think."},
        {"content": "Let me check."},
        {"tool_calls": [{"index": 0, "id": "call_a1", "type": "function",
                         "function": {"name": "get_weather", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
        {"tool_calls": [{"index": 1, "id": "call_b2", "type": "function",
                         "function": {"name": "get_time", "arguments": ""}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]},
        {},  # the finish reason's own chunk
    ]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes == [None] * 8 + ["tool_calls"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens_details"][
        "reasoning_tokens"] == 1


def test_openai_stream_equals_the_whole_answer_through_the_client(oai):
    whole = oai.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS).choices[0]
    streamed = openai_stream(oai.chat.completions.create(model=MODEL, messages=USER,
                                                         tools=TOOLS, stream=True))
    assert streamed.finish_reason == whole.finish_reason == "tool_calls"
    assert streamed.reasoning == whole.message.model_extra["reasoning_content"]
    assert streamed.content == "" and whole.message.content is None
    assert streamed.tool_calls() == [(c.id, c.function.name, c.function.arguments)
                                     for c in whole.message.tool_calls]


def test_calls_without_ids_get_call_ids(fake):
    fake.script = [ToolCallEvent(0, "{}", name="get_time")]
    with served(fake) as client:
        whole = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
        first = sse(client, {})[1]["choices"][0]["delta"]["tool_calls"][0]
    assert whole.json()["choices"][0]["message"]["tool_calls"][0]["id"].startswith("call_")
    assert first["id"].startswith("call_") and len(first["id"]) > 10


def test_a_call_cut_off_by_max_tokens_ends_with_length_and_no_half_call(fake):
    fake.script = [TokenEvent("Sure."), ToolCallEvent(0, '{"city": "Pa', id="call_1",
                                                      name="get_weather")]
    fake.finish, fake.cut_call = "length", True
    with served(fake) as client:
        r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
        lines = ndjson(client, "/api/chat", {"messages": USER})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"] == {
        "role": "assistant", "content": "Sure."}
    assert not any("tool_calls" in ln.get("message", {}) for ln in lines)
    assert lines[-1]["done_reason"] == "length"


# ---------------------------------------------------------------------------- Ollama
def test_ollama_chat_answer_with_thinking_and_calls_as_objects(oll):
    r = oll.chat(model=MODEL, messages=USER, tools=TOOLS, think=True)
    assert r.message.thinking == "The user wants two things." and r.message.content == ""
    assert [(c.function.name, c.function.arguments) for c in r.message.tool_calls] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert r.done_reason == "stop"  # Ollama's native API says stop for calls too


def test_ollama_stream_sends_thinking_in_pieces_and_each_call_whole(fake):
    fake.script = [*THINK_THEN_TWO_CALLS, TokenEvent("Done.")]
    with served(fake) as client:
        lines = ndjson(client, "/api/chat", {"messages": USER, "tools": TOOLS})
        whole = client.post("/api/chat", json={"model": MODEL, "messages": USER,
                                               "tools": TOOLS, "stream": False}).json()
    messages = [ln["message"] for ln in lines]
    assert messages[:2] == [
        {"role": "assistant", "content": "", "thinking": "The user wants"},
        {"role": "assistant", "content": "", "thinking": " two things."}]
    assert messages[2:4] == [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_a1", "function": {
            "index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_b2", "function": {
            "index": 1, "name": "get_time", "arguments": {}}}]}]
    assert messages[4] == {"role": "assistant", "content": "Done."}
    assert lines[-1]["done"] and lines[-1]["done_reason"] == "stop"
    assert whole["message"] == {
        "role": "assistant", "content": "Done.", "thinking": "The user wants two things.",
        "tool_calls": [m["tool_calls"][0] for m in messages[2:4]]}


def test_ollama_stream_sends_the_last_call_at_the_end(oll):
    parts = list(oll.chat(model=MODEL, messages=USER, tools=TOOLS, stream=True))
    calls = [c for p in parts for c in p.message.tool_calls or ()]
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert parts[-1].done and not parts[-1].message.tool_calls


def test_ollama_generate_has_top_level_thinking(fake):
    fake.script = [ReasoningEvent("Hmm."), TokenEvent("Hi.")]
    with served(fake) as client:
        whole = client.post("/api/generate", json={"model": MODEL, "prompt": "hi",
                                                   "think": True, "stream": False}).json()
        lines = ndjson(client, "/api/generate", {"prompt": "hi", "think": True})
    assert whole["thinking"] == "Hmm." and whole["response"] == "Hi."
    assert [(ln.get("thinking"), ln["response"]) for ln in lines[:-1]] == [
        ("Hmm.", ""), (None, "Hi.")]
