"""Bad tools, tool choices, tool turns and thinking knobs: each a 400 that says what is wrong
and where (OpenAI's `param`), never a 500, and the server keeps serving."""

from __future__ import annotations

import pytest

from backends.base import TokenEvent
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served

USER = {"role": "user", "content": "hi"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
CALL = {"role": "assistant", "content": None, "tool_calls": [{
    "id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}

BAD = [  # (body, param, words the message has)
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "strin"}}}}}]},
     "tools[0].function.parameters.properties.x.type", "not a valid JSON schema"),
    ({"tools": [WEATHER, {"type": "function", "function": {
        "name": "g", "parameters": {"type": "array"}}}]},
     "tools[1].function.parameters.type", "must describe an object"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "nope"}}]},
     "tools[0].function.parameters", "dictionary"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]},
     "tools[0].function.name", "not valid"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name", "offered twice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name", "not among the offered tools"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tool_choice": "sometimes"}, "tool_choice", "Input should be"),
    ({"messages": [USER, CALL, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]},
     "messages[2].tool_call_id", "no earlier assistant message"),
    ({"messages": [USER, {"role": "tool", "content": "x"}]},
     "messages[1].tool_call_id", "needs the tool_call_id"),
    ({"messages": [USER, {**CALL, "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_weather", "arguments": "{city: Paris"}}]}]},
     "messages[1].tool_calls[0].function.arguments", "not JSON"),
    ({"messages": [USER, {**CALL, "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_weather", "arguments": "[1, 2]"}}]}]},
     "messages[1].tool_calls[0].function.arguments", "must be a JSON object"),
    ({"messages": [USER, {**CALL, "tool_calls": [{"id": "c", "function": {
        "arguments": "{}"}}]}]}, "messages[1].tool_calls[0].function.name", "required"),
    ({"messages": [{**USER, "tool_calls": CALL["tool_calls"]}]},
     "messages[0].tool_calls", "only assistant messages"),
    ({"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}},
     "chat_template_kwargs.enable_thinking", "turns thinking on"),
    ({"reasoning_effort": "low", "reasoning": {"effort": "high"}},
     "reasoning.effort", "high reasoning effort"),
    ({"chat_template_kwargs": {"enable_thinking": "yes"}},
     "chat_template_kwargs.enable_thinking", "true or false"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort", "Input should be"),
]


@pytest.mark.parametrize(("body", "param", "words"), BAD)
def test_openai_bad_tool_input_is_a_400_with_its_path(body, param, words):
    fake = ScriptedRuntime(script=[TokenEvent("ok")])
    with served(fake) as client:
        r = client.post("/v1/chat/completions",
                        json={"model": MODEL, "messages": [USER]} | body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param
        assert words in error["message"], error["message"]
        assert fake.requests == []  # refused before anything ran
        ok = client.post("/v1/chat/completions", json={"model": MODEL, "messages": [USER]})
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "ok"


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "get_weather"}}])
def test_forced_calls_on_a_backend_that_cannot_constrain_say_which(choice):
    fake = ScriptedRuntime(backend="mlx", grammar=False)
    with served(fake) as client:
        r = client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [USER], "tools": [WEATHER], "tool_choice": choice})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
        assert "the mlx backend" in r.json()["error"]["message"]
        # auto needs no grammar
        assert client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [USER], "tools": [WEATHER]}).status_code == 200


def test_ollama_bad_tool_input_is_a_400_in_ollama_shape():
    fake = ScriptedRuntime(context=2048)
    with served(fake) as client:
        r = client.post("/api/chat", json={"model": MODEL, "messages": [USER], "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "required": "city"}}}]})
        assert r.status_code == 400 and "not a valid JSON schema" in r.json()["error"]
        r = client.post("/api/chat", json={"model": MODEL, "messages": [USER], "stream": False,
                                           "options": {"num_predict": 5000}})
        assert r.status_code == 200  # a ceiling, not a demand (issue 38)
        assert fake.requests[-1].sampling.max_tokens == 5000
        r = client.post("/api/chat", json={"model": MODEL, "messages": [USER], "think": "hard"})
        assert r.status_code == 400 and "think" in r.json()["error"]
        r = client.post("/api/chat", json={"model": MODEL, "stream": False, "messages": [
            USER, {"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]})
        assert r.status_code == 400
        assert r.json()["error"] == "messages[1].tool_calls[0].function.name: Field required"
        assert client.post("/api/chat", json={"model": MODEL, "messages": [USER],
                                              "stream": False}).status_code == 200


def test_num_ctx_sets_the_context_max_tokens_is_checked_against():
    fake = ScriptedRuntime(context=2048)
    with served(fake) as client:
        r = client.post("/api/chat", json={"model": MODEL, "messages": [USER], "stream": False,
                                           "options": {"num_predict": 5000, "num_ctx": 8192}})
    assert r.status_code == 200 and fake.requests[-1].sampling.max_tokens == 5000
