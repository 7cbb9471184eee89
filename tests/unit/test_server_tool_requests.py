"""What the OpenAI and Ollama routes ask the Runtime for: tools, tool choice, conversations
with tool calls, tool results and thinking, and the thinking knobs, mapped into one
GenerationRequest (app.server.generation_request)."""

from __future__ import annotations

import json

import pytest

from backends.base import Message, Thinking, ToolCall, ToolChoice
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time"}}  # no parameters at all
USER = {"role": "user", "content": "Weather in Paris?"}


@pytest.fixture
def fake() -> ScriptedRuntime:
    return ScriptedRuntime()


def chat(fake: ScriptedRuntime, **body):
    with served(fake) as client:
        r = client.post("/v1/chat/completions", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return fake.requests[-1]


def ollama_chat(fake: ScriptedRuntime, **body):
    with served(fake) as client:
        r = client.post("/api/chat", json={"model": MODEL, "stream": False, **body})
    assert r.status_code == 200, r.text
    return fake.requests[-1]


def test_openai_tools_become_tools_with_auto_choice_and_parallel_calls(fake):
    req = chat(fake, messages=[USER], tools=[WEATHER, CLOCK])
    assert [(t.name, t.description, t.parameters) for t in req.tools] == [
        ("get_weather", "Weather of a city", WEATHER["function"]["parameters"]),
        ("get_time", "", {"type": "object", "properties": {}})]
    assert req.tool_choice == ToolChoice("auto") and req.parallel_tool_calls is True


@pytest.mark.parametrize(("wire", "choice"), [
    ("none", ToolChoice("none")), ("auto", ToolChoice("auto")),
    ("required", ToolChoice("required")),
    ({"type": "function", "function": {"name": "get_time"}}, ToolChoice("function", "get_time")),
])
def test_openai_tool_choice_modes(fake, wire, choice):
    req = chat(fake, messages=[USER], tools=[WEATHER, CLOCK], tool_choice=wire,
               parallel_tool_calls=False)
    assert req.tool_choice == choice and req.parallel_tool_calls is False


def test_openai_conversation_with_calls_results_and_reasoning(fake):
    req = chat(fake, tools=[WEATHER], messages=[
        {"role": "developer", "content": "Be brief."},
        USER,
        {"role": "assistant", "content": None, "reasoning_content": "Paris, so call it.",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {
             "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18°C"},
        {"role": "assistant", "content": "18°C in Paris.", "reasoning": "Easy."},
        {"role": "user", "content": [{"type": "text", "text": "And "},
                                     {"type": "text", "text": "tomorrow?"}]}])
    assert req.messages == (
        Message("system", "Be brief."),
        Message("user", "Weather in Paris?"),
        Message("assistant", "", reasoning="Paris, so call it.",
                tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
        # the result is named after its call: templates such as Llama 3's render the name
        Message("tool", "18°C", tool_call_id="call_1", name="get_weather"),
        Message("assistant", "18°C in Paris.", reasoning="Easy."),
        Message("user", "And tomorrow?"))


def test_openai_arguments_sent_as_an_object_are_taken_as_json_text(fake):
    req = chat(fake, messages=[USER, {"role": "assistant", "tool_calls": [
        {"id": "c", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
        {"role": "tool", "tool_call_id": "c", "content": "9°C"}])
    call = req.messages[1].tool_calls[0]
    assert json.loads(call.arguments) == {"city": "Zürich"} and "Zürich" in call.arguments


def test_legacy_tool_message_with_a_name_and_no_id(fake):
    req = chat(fake, messages=[USER, {"role": "tool", "name": "get_weather", "content": "x"}])
    assert req.messages[1] == Message("tool", "x", name="get_weather")


@pytest.mark.parametrize(("knobs", "thinking"), [
    ({}, Thinking()),
    ({"reasoning_effort": "none"}, Thinking(enabled=False)),
    ({"reasoning_effort": "minimal"}, Thinking(enabled=True, effort="low")),
    ({"reasoning_effort": "high"}, Thinking(enabled=True, effort="high")),
    ({"reasoning": {"effort": "medium"}}, Thinking(enabled=True, effort="medium")),
    ({"reasoning": {"enabled": False}}, Thinking(enabled=False)),
    ({"chat_template_kwargs": {"enable_thinking": False}}, Thinking(enabled=False)),
    ({"chat_template_kwargs": {"enable_thinking": True, "reasoning_effort": "low"}},
     Thinking(enabled=True, effort="low")),
    ({"reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": True}},
     Thinking(enabled=True, effort="low")),
])
def test_openai_thinking_knobs_map_to_one_setting(fake, knobs, thinking):
    assert chat(fake, messages=[USER], **knobs).thinking == thinking


def test_response_format_passes_through_with_thinking(fake):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = chat(fake, messages=[USER], reasoning_effort="low",
               response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    assert req.json_mode and req.json_schema == schema and req.thinking.enabled


def test_max_tokens_beyond_8192_is_taken_up_to_the_context(fake):
    fake.context = 32768
    assert chat(fake, messages=[USER], max_tokens=30000).sampling.max_tokens == 30000
    assert chat(fake, messages=[USER], max_completion_tokens=32768).sampling.max_tokens \
        == 32768
    assert chat(fake, messages=[USER]).sampling.max_tokens is None  # until the context is full


def test_completions_still_map_a_raw_prompt(fake):
    with served(fake) as client:
        r = client.post("/v1/completions", json={"model": MODEL, "prompt": "def f():"})
    assert r.status_code == 200
    req = fake.requests[-1]
    assert req.prompt == "def f():" and req.messages is None and req.sampling.max_tokens == 16


# ---------------------------------------------------------------------------- Ollama
def test_ollama_tools_calls_as_objects_and_tool_name_results(fake):
    req = ollama_chat(fake, tools=[WEATHER], messages=[
        USER,
        {"role": "assistant", "content": "", "thinking": "Call it.", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "18°C"}])
    assert [t.name for t in req.tools] == ["get_weather"]
    assert req.tool_choice == ToolChoice("auto")
    assert req.messages[1] == Message("assistant", "", reasoning="Call it.", tool_calls=(
        ToolCall("", "get_weather", '{"city": "Paris"}'),))
    assert req.messages[2] == Message("tool", "18°C", name="get_weather")


def test_ollama_tool_result_with_a_call_id(fake):
    req = ollama_chat(fake, messages=[USER, {"role": "assistant", "tool_calls": [
        {"id": "call_x", "function": {"name": "get_weather", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "call_x", "content": "1"}])
    assert req.messages[2] == Message("tool", "1", tool_call_id="call_x", name="get_weather")


@pytest.mark.parametrize(("think", "thinking"), [
    (None, Thinking()), (True, Thinking(enabled=True)), (False, Thinking(enabled=False)),
    ("low", Thinking(enabled=True, effort="low")),
    ("high", Thinking(enabled=True, effort="high")),
    ("max", Thinking(enabled=True, effort="high")),
])
def test_ollama_think(fake, think, thinking):
    body = {"messages": [USER]} | ({} if think is None else {"think": think})
    assert ollama_chat(fake, **body).thinking == thinking
    with served(fake) as client:
        r = client.post("/api/generate", json={"model": MODEL, "prompt": "hi", "stream": False}
                        | ({} if think is None else {"think": think}))
    assert r.status_code == 200 and fake.requests[-1].thinking == thinking


def test_ollama_num_predict_is_bounded_by_the_context_not_8192(fake):
    fake.context = 16384
    req = ollama_chat(fake, messages=[USER], options={"num_predict": 12000})
    assert req.sampling.max_tokens == 12000
    assert ollama_chat(fake, messages=[USER], options={"num_predict": -1}
                       ).sampling.max_tokens is None
