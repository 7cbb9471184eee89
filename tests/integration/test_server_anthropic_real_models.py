"""Anthropic's Messages API through `ember serve` with real models (Qwen2.5-Coder 0.5B, and
the 1.5B for the tool loop: the 0.5B is unreliable at tools) and the official anthropic
client, greedy: plain answers whole and streamed (the SDK's stream helper adds up to the
whole answer), system prompts, stop sequences, max_tokens, a three-turn tool loop, tool
choices, count_tokens against a generation's usage, the key as x-api-key, and malformed
bodies answered in Anthropic's error shape. One server for the module; small max_tokens
(the 1.5B decodes ~12 tokens/s on CI)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import pytest

from app.runtime import Runtime
from tests.support.live_server import live_server

GREEDY = {"extra_body": {"temperature": 0}}  # this SDK has no temperature argument
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "description": "City name"}}, "required": ["city"]}}
CLOCK = {"name": "get_time", "description": "Get the current local time",
         "input_schema": {"type": "object", "properties": {}}}
PARIS = {"role": "user", "content": "What's the weather in Paris?"}
CAPITAL = {"role": "user", "content": "What is the capital of France?"}
COUNT = {"role": "user", "content": "Count from 1 to 10, separated by commas."}
# Qwen2.5-Coder repeats its call after a result unless told to answer (as in
# test_server_tools.py); the whole loop runs with this system prompt, so turns share a prefix
AFTER_RESULT = ("You are a helpful assistant. When a tool result is given, do not call the tool "
                "again: answer the user in plain words from it.")


@pytest.fixture(scope="module")
def server(store, qwen, qwen15) -> Iterator[tuple[str, Runtime]]:
    with live_server(store) as s:
        yield s


@pytest.fixture(scope="module")
def client(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server[0], api_key="unused", max_retries=0,
                               timeout=600)


def prompt_tokens(usage) -> int:
    """The whole prompt: Anthropic counts the tokens read from the cache apart."""
    return usage.input_tokens + usage.cache_read_input_tokens


def blocks(message) -> list[dict]:
    """A message's content without the tool_use ids (each request makes its own)."""
    return [b.model_dump(exclude_none=True, exclude={"id"}) for b in message.content]


def whole_and_streamed(client: anthropic.Anthropic, **kw):
    """The same greedy request whole and through the SDK's stream helper: they must say the
    same (the prompt's length too, whatever the prefix cache reused the second time)."""
    whole = client.messages.create(**kw, **GREEDY)
    with client.messages.stream(**kw, **GREEDY) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    # message_start already gives the prompt's length (its cached part moves at the end)
    assert events[0].message.usage.input_tokens == prompt_tokens(whole.usage)
    assert "content_block_delta" in kinds and kinds.count("content_block_start") == len(
        streamed.content) == kinds.count("content_block_stop")
    assert blocks(streamed) == blocks(whole)
    assert (streamed.stop_reason, streamed.stop_sequence) == (whole.stop_reason,
                                                              whole.stop_sequence)
    assert streamed.usage.output_tokens == whole.usage.output_tokens
    assert prompt_tokens(streamed.usage) == prompt_tokens(whole.usage)
    assert whole.id.startswith("msg_") and streamed.id.startswith("msg_")
    return whole, streamed


# ---------------------------------------------------------------------------- answers
def test_a_plain_answer_whole_and_streamed(client, qwen):
    whole, _ = whole_and_streamed(client, model=qwen.id, max_tokens=16, messages=[CAPITAL])
    (text,) = whole.content
    assert text.type == "text" and "Paris" in text.text
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.role == "assistant"
    assert whole.model == qwen.id and 0 < whole.usage.output_tokens <= 16
    assert whole.usage.cache_creation_input_tokens == 0


def test_a_system_prompt_as_a_string_or_as_text_blocks_says_the_same(client, qwen):
    system = "Answer in one word."
    as_text = client.messages.create(model=qwen.id, max_tokens=12, system=system,
                                     messages=[CAPITAL], **GREEDY)
    as_blocks = client.messages.create(model=qwen.id, max_tokens=12, messages=[CAPITAL],
                                       system=[{"type": "text", "text": system,
                                                "cache_control": {"type": "ephemeral"}}],
                                       **GREEDY)
    counted = client.messages.count_tokens(model=qwen.id, messages=[CAPITAL],
                                           system=[{"type": "text", "text": system}])
    assert blocks(as_blocks) == blocks(as_text)
    assert prompt_tokens(as_blocks.usage) == prompt_tokens(as_text.usage) == \
        counted.input_tokens
    assert as_text.content[0].text.strip(" .") == "Paris"  # the system prompt was heard


def test_a_stop_sequence_ends_the_answer_and_is_named(client, qwen):
    whole, _ = whole_and_streamed(client, model=qwen.id, max_tokens=24, messages=[COUNT],
                                  stop_sequences=["7", ", 5"])
    assert whole.stop_reason == "stop_sequence" and whole.stop_sequence == ", 5"
    assert whole.content[0].text == "1, 2, 3, 4"  # cut before the stop string


def test_max_tokens_ends_the_answer_as_max_tokens(client, qwen):
    whole, _ = whole_and_streamed(client, model=qwen.id, max_tokens=3, messages=[COUNT])
    assert whole.stop_reason == "max_tokens" and whole.stop_sequence is None
    assert whole.usage.output_tokens == 3


def test_output_config_format_makes_the_answer_json_of_its_schema(client, qwen):
    schema = {"type": "object", "properties": {"capital": {"type": "string"}},
              "required": ["capital"], "additionalProperties": False}
    message = client.messages.create(
        model=qwen.id, max_tokens=24, messages=[CAPITAL],
        output_config={"format": {"type": "json_schema", "schema": schema}}, **GREEDY)
    assert message.stop_reason == "end_turn"
    assert json.loads(message.content[0].text) == {"capital": "Paris"}


# ---------------------------------------------------------------------------- tools
def test_a_tool_loop_of_three_turns_whole_and_streamed(client, qwen15):
    """user question -> tool_use with the right input -> tool_result -> an answer from it;
    the assistant's content goes back as it came, as Anthropic's docs do it."""
    ask = {"model": qwen15.id, "system": AFTER_RESULT, "tools": [WEATHER]}
    called, called_streamed = whole_and_streamed(client, **ask, max_tokens=48,
                                                 messages=[PARIS])
    assert called.stop_reason == "tool_use"
    (call,) = [b for b in called.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})
    assert call.id.startswith("toolu_")

    def answer_to(turn) -> list:
        (use,) = [b for b in turn.content if b.type == "tool_use"]
        return [PARIS, {"role": "assistant", "content": turn.content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                              "content": "18°C and sunny"}]}]

    answered = client.messages.create(**ask, max_tokens=32, messages=answer_to(called),
                                      **GREEDY)
    with client.messages.stream(**ask, max_tokens=32, messages=answer_to(called_streamed),
                                **GREEDY) as stream:
        answered_streamed = stream.get_final_message()
    assert answered.stop_reason == "end_turn"
    assert [b.type for b in answered.content] == ["text"]
    assert "18°C" in answered.content[0].text
    assert blocks(answered_streamed) == blocks(answered)
    # the prompt with tools, a call and its result is counted as the generation read it
    counted = client.messages.count_tokens(**ask, messages=answer_to(called))
    assert counted.input_tokens == prompt_tokens(answered.usage)


@pytest.mark.parametrize(("choice", "calls"), [
    ({"type": "any", "disable_parallel_tool_use": True}, [("get_weather", {"city": "Paris"})]),
    ({"type": "tool", "name": "get_time"}, [("get_time", {})]),
    ({"type": "none"}, []),
])
def test_tool_choice_any_tool_and_none(client, qwen, choice, calls):
    message = client.messages.create(model=qwen.id, max_tokens=32, messages=[PARIS],
                                     tools=[WEATHER, CLOCK], tool_choice=choice, **GREEDY)
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == calls
    if calls:
        assert message.stop_reason == "tool_use"
    else:
        assert message.stop_reason in ("end_turn", "max_tokens")
        assert message.content[0].type == "text" and message.content[0].text


def test_count_tokens_equals_the_prompt_a_generation_of_the_request_reads(client, qwen):
    ask = {"model": qwen.id, "system": "Be brief.", "tools": [WEATHER, CLOCK],
           "messages": [CAPITAL]}
    counted = client.messages.count_tokens(**ask)
    generated = client.messages.create(**ask, max_tokens=4, **GREEDY)
    assert counted.input_tokens == prompt_tokens(generated.usage)
    # the tools are part of the prompt the template renders
    without_tools = client.messages.count_tokens(model=qwen.id, system="Be brief.",
                                                 messages=[CAPITAL])
    assert counted.input_tokens > without_tools.input_tokens + 50


# ---------------------------------------------------------------------------- the key
def test_the_key_as_x_api_key_and_anthropics_401_without_it(store, qwen):
    with live_server(store, api_key="s3cret") as (url, _):
        keyed = anthropic.Anthropic(base_url=url, api_key="s3cret", max_retries=0, timeout=300)
        counted = keyed.messages.count_tokens(model=qwen.id, messages=[CAPITAL])
        with pytest.raises(anthropic.AuthenticationError) as refused:
            anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(
                model=qwen.id, max_tokens=4, messages=[CAPITAL])
        missing = httpx.post(url + "/v1/messages", json={
            "model": qwen.id, "max_tokens": 4, "messages": [CAPITAL]})
    assert counted.input_tokens > 0
    assert refused.value.status_code == 401
    assert refused.value.body == missing.json() == {"type": "error", "error": {
        "type": "authentication_error",
        "message": "missing or wrong API key: send 'Authorization: Bearer KEY' (or "
                   "'x-api-key: KEY')"}}


# ---------------------------------------------------------------------------- malformed bodies
@pytest.mark.parametrize(("body", "status", "says"), [
    ({"messages": [CAPITAL]}, 400, "max_tokens: Field required"),
    ({"max_tokens": 8, "messages": [{"role": "robot", "content": "hi"}]}, 400,
     "messages[0].role: Input should be 'user', 'assistant' or 'system'"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}}]}]}, 400,
     "messages[0].content[0].source.data is not an image Ember reads (formats: PNG, JPEG, "
     "GIF, WEBP, BMP)"),
    ({"max_tokens": 8, "tools": [WEATHER], "messages": [
        PARIS, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_nowhere", "content": "18°C"}]}]}, 400,
     "messages[1].content[0].tool_use_id: a tool_result for 'toolu_nowhere', but the "
     "assistant turn just before it made no tool_use with that id"),
    ({"max_tokens": 8, "temperature": 1.5, "messages": [CAPITAL]}, 400,
     "temperature: Input should be less than or equal to 1"),
    ({"max_tokens": 8, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_stock"},
      "messages": [PARIS]}, 400,
     "tool_choice names 'get_stock', which is not among the offered tools (get_weather)"),
    ({"max_tokens": 8, "messages": []}, 400, "messages: List should have at least 1 item"),
    ({"model": "no-such-model", "max_tokens": 8, "messages": [CAPITAL]}, 404,
     "unknown model 'no-such-model'"),
])
def test_malformed_bodies_are_anthropic_errors_naming_the_problem(server, qwen, body, status,
                                                                  says):
    r = httpx.post(server[0] + "/v1/messages", json={"model": qwen.id, **body}, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()
    assert error["type"] == "error" and set(error["error"]) == {"type", "message"}
    assert error["error"]["type"] == ("not_found_error" if status == 404
                                      else "invalid_request_error")
    assert says in error["error"]["message"], error


def test_a_body_that_is_not_json_is_a_400_and_the_sdk_reads_every_error(server, client, qwen):
    r = httpx.post(server[0] + "/v1/messages", content=b'{"model": ', timeout=60,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "request body is not valid JSON"}}
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=qwen.id, max_tokens=8, messages=[CAPITAL],
                               extra_body={"top_p": 0})
    assert bad.value.body["error"]["message"] == "top_p: Input should be greater than 0"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=[CAPITAL])
