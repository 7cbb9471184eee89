"""OpenAI's Responses API through `ember serve` with real models (Qwen2.5-Coder 0.5B, and the
1.5B for tool loops: the 0.5B is unreliable at tools) and the official openai client, greedy:
a plain answer whole and streamed, instructions, max_output_tokens, structured output, a
tool loop (question -> function_call; function_call_output -> an answer from it), continued
by previous_response_id and by re-sending the items, streamed and not, a chain of three
turns, GET and DELETE, and the errors. One server for
the module; small max_output_tokens (the 1.5B decodes ~12 tokens/s on CI)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import jsonschema
import openai
import pytest
from openai.types.responses import Response

from app.runtime import Runtime
from tests.support.live_server import live_server

WEATHER = {"type": "function", "name": "get_weather",
           "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "description": "City name"}}, "required": ["city"]}}
# Qwen2.5-Coder repeats its call after a result unless told to answer from it (as in
# test_server_tools; with that file's wording, the 1.5B echoed the call as JSON here).
AFTER_RESULT = ("You are a helpful assistant. Answer the user in plain words from a tool result "
                "once it is given.")
QUESTION = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(store, qwen, qwen15) -> Iterator[tuple[str, Runtime]]:
    with live_server(store) as s:
        yield s


@pytest.fixture(scope="module")
def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0)


def without_ids(response: Response) -> dict:
    """What two requests for the same greedy answer agree on: not the ids Ember makes up,
    nor the prompt tokens the second one found in the cache."""
    out = response.model_dump(exclude={"id", "created_at", "completed_at"})
    for item in out["output"]:
        item.pop("id", None)
        item.pop("call_id", None)  # Ember makes a new one for each call
    out["usage"]["input_tokens_details"].pop("cached_tokens")
    return out


def streamed(oai: openai.OpenAI, **kw) -> tuple[Response, list]:
    """A streamed response: the one its last event carries, and the events."""
    with oai.responses.create(**kw, stream=True) as stream:
        events = list(stream)
    assert events[-1].type in ("response.completed", "response.incomplete")
    return events[-1].response, events


def test_a_plain_answer_whole_and_streamed_are_the_same(oai, qwen):
    kw = {"model": qwen.id, "input": "Name three primary colors.", "temperature": 0,
          "max_output_tokens": 24}
    whole = oai.responses.create(**kw)
    final, events = streamed(oai, **kw)
    assert whole.object == "response" and whole.id.startswith("resp_")
    assert whole.status == "completed" or whole.incomplete_details.reason == "max_output_tokens"
    assert "red" in whole.output_text.lower() and whole.output[0].type == "message"
    assert whole.usage.output_tokens <= 24 and whole.usage.input_tokens > 0
    assert without_ids(final) == without_ids(whole)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))
    # the SDK's stream helper, which checks every item's life (added, deltas, done)
    with oai.responses.stream(**kw) as stream:
        for _ in stream:
            pass
        assert stream.get_final_response().output_text == whole.output_text


def test_instructions_are_the_system_message(oai, qwen):
    r = oai.responses.create(model=qwen.id, temperature=0, max_output_tokens=8,
                             instructions="Answer with the capital city only, one word.",
                             input="France")
    assert "Paris" in r.output_text and r.instructions.startswith("Answer with")


def test_max_output_tokens_ends_an_incomplete_response(oai, qwen):
    kw = {"model": qwen.id, "input": "Count from 1 to 100, comma separated.",
          "temperature": 0, "max_output_tokens": 6}
    whole = oai.responses.create(**kw)
    assert whole.status == "incomplete"
    assert whole.incomplete_details.reason == "max_output_tokens"
    assert whole.usage.output_tokens == 6 and whole.output[0].status == "incomplete"
    # the stream ends with response.incomplete (not .completed) carrying the same response
    final, events = streamed(oai, **kw)
    assert events[-1].type == "response.incomplete" and without_ids(final) == without_ids(whole)


def test_structured_output_follows_the_json_schema(oai, qwen):
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "population_millions": {"type": "number"}},
              "required": ["city", "population_millions"], "additionalProperties": False}
    r = oai.responses.create(
        model=qwen.id, temperature=0, max_output_tokens=48,
        input="Give the largest city of Japan and its population in millions as JSON.",
        text={"format": {"type": "json_schema", "name": "city", "schema": schema,
                         "strict": True}})
    assert r.status == "completed" and r.text.format.type == "json_schema"
    jsonschema.validate(json.loads(r.output_text), schema)


def tool_turn(oai: openai.OpenAI, model: str, stream: bool, **kw) -> Response:
    kw = {"model": model, "instructions": AFTER_RESULT, "tools": [WEATHER],
          "temperature": 0, "max_output_tokens": 32, **kw}
    return streamed(oai, **kw)[0] if stream else oai.responses.create(**kw)


@pytest.fixture(scope="module")
def weather_call(oai, qwen15) -> dict[bool, Response]:
    """The loop's first turn, whole (False) and streamed (True): the question."""
    return {stream: tool_turn(oai, qwen15.id, stream, input=QUESTION)
            for stream in (False, True)}


def test_a_question_is_answered_by_a_call_whole_and_streamed(weather_call):
    whole, streamed_ = weather_call[False], weather_call[True]
    assert without_ids(streamed_) == without_ids(whole)
    (call,) = whole.output
    assert call.type == "function_call" and call.status == "completed"
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    assert whole.output_text == ""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("continued_by", ["previous_response_id", "items"])
def test_the_call_result_is_answered_in_words(oai, qwen15, weather_call, stream,
                                             continued_by):
    first = weather_call[stream]
    result = {"type": "function_call_output", "call_id": first.output[0].call_id,
              "output": "18°C and sunny"}
    if continued_by == "previous_response_id":
        second = tool_turn(oai, qwen15.id, stream, input=[result],
                           previous_response_id=first.id)
        assert second.previous_response_id == first.id
    else:  # what a client that keeps its own history (Codex, store: false) sends
        second = tool_turn(oai, qwen15.id, stream, store=False, input=[
            *QUESTION, *(item.model_dump(exclude_none=True) for item in first.output),
            result])
    assert [item.type for item in second.output] == ["message"]
    assert "18°C" in second.output_text


def test_a_chain_of_three_remembers_the_first_turn(oai, qwen):
    kw = {"model": qwen.id, "temperature": 0, "max_output_tokens": 16}
    first = oai.responses.create(**kw, input="My name is Ada. Just reply OK.")
    second = oai.responses.create(**kw, input="I live in Lisbon. Just reply OK.",
                                  previous_response_id=first.id)
    third = oai.responses.create(**kw, input="What is my name, and in which city do I live?",
                                 previous_response_id=second.id)
    assert "Ada" in third.output_text and "Lisbon" in third.output_text
    assert third.previous_response_id == second.id
    # the whole conversation was the prompt
    assert first.usage.input_tokens < second.usage.input_tokens < third.usage.input_tokens


def test_unknown_previous_response_id_is_a_404_naming_it(oai, qwen):
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model=qwen.id, input="Hi", previous_response_id="resp_missing")
    assert "resp_missing" in e.value.message
    assert e.value.body["param"] == "previous_response_id"


def test_get_and_delete_a_stored_response(oai, qwen):
    made = oai.responses.create(model=qwen.id, input="Say hi.", temperature=0,
                                max_output_tokens=8, metadata={"task": "greeting"})
    got = oai.responses.retrieve(made.id)
    assert got.model_dump() == made.model_dump() and got.metadata == {"task": "greeting"}
    unstored = oai.responses.create(model=qwen.id, input="Say hi.", temperature=0,
                                    max_output_tokens=8, store=False)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(unstored.id)
    oai.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.delete(made.id)


BAD = [  # (body or raw bytes, status, param, words in the message)
    ({}, 400, "input", "Field required"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, 400, "input[0]",
     "item type 'web_search_call' is not supported"),
    ({"input": [{"role": "user", "content": "Hi"},
                {"type": "function_call_output", "call_id": "call_zzz", "output": "x"}]},
     400, "input[1].call_id", "no function_call with that call_id"),
    ({"input": "Hi", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}},
     400, "tool_choice", "tool_choice forces the tool type 'web_search'"),
    ({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]},
     400, "input[0].content[1].image_url", "is not an image Ember reads (formats: PNG"),
    ({"input": "Hi", "temperature": 3}, 400, "temperature", "less than or equal to 2"),
    ({"input": "Hi", "tools": [WEATHER], "tool_choice": {"type": "function",
                                                          "name": "get_time"}},
     400, "tool_choice.name", "'get_time', which is not among the offered tools"),
    (b"{\"model\": ", 400, None, "request body is not valid JSON"),
]


@pytest.mark.parametrize(("body", "status", "param", "words"), BAD)
def test_malformed_requests_are_openai_errors_that_name_the_problem(server, qwen, body,
                                                                   status, param, words):
    url = server[0] + "/v1/responses"
    if isinstance(body, bytes):
        r = httpx.post(url, content=body, headers={"content-type": "application/json"},
                       timeout=60)
    else:
        r = httpx.post(url, json={"model": qwen.id, **body}, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"], error["message"]
