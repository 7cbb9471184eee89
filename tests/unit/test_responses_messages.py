"""The Responses API's input items -> Ember's conversation (generation_request
.responses_messages and its neighbours): messages and their parts, runs of assistant items
as one turn, tool results, reasoning, previous turns, and the 400s of bad items."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.server.responses.inbound import (
    responses_format,
    responses_messages,
    responses_param,
    responses_thinking,
    responses_tool_choice,
)
from app.server.responses.schemas import ReasoningConfig, ResponseCreateRequest
from app.server.responses.tools import offered_tools
from backends.base import Message, Thinking, Tool, ToolCall, ToolChoice
from backends.errors import InvalidRequestError

CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather",
        "arguments": "{\"city\": \"Paris\"}"}
RESULT = {"type": "function_call_output", "call_id": "call_1", "output": "18°C"}


def request(**fields: object) -> ResponseCreateRequest:
    return ResponseCreateRequest.model_validate({"model": "m", **fields})


def messages(items: object, earlier: tuple[Message, ...] = ()) -> tuple[Message, ...]:
    return responses_messages(request(input=items).input, earlier)


def test_a_string_is_one_user_turn():
    assert messages("Hi there") == (Message("user", "Hi there"),)


def test_messages_with_and_without_type_and_their_text_parts():
    assert messages([
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "system", "content": [{"type": "input_text",
                                                             "text": "Speak French."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                     {"type": "input_text", "text": "in Paris?"}]},
    ]) == (Message("system", "Be brief."), Message("system", "Speak French."),
           Message("user", "Weather in Paris?"))


def test_reasoning_text_and_calls_in_a_row_are_one_assistant_turn():
    assert messages([
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text",
                                                         "text": "not the thinking"}],
         "content": [{"type": "reasoning_text", "text": "Two cities, "},
                     {"type": "reasoning_text", "text": "two calls."}],
         "encrypted_content": "opaque"},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        CALL,
        {**CALL, "call_id": "call_2", "arguments": "{\"city\": \"Rome\"}"},
        RESULT,
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "21°C"}]},
    ]) == (
        Message("user", "Weather in Paris and Rome?"),
        Message("assistant", "Checking.", reasoning="Two cities, two calls.", tool_calls=(
            ToolCall("call_1", "get_weather", "{\"city\": \"Paris\"}"),
            ToolCall("call_2", "get_weather", "{\"city\": \"Rome\"}"))),
        # results are named after their calls (templates such as Llama 3's render the name)
        Message("tool", "18°C", tool_call_id="call_1", name="get_weather"),
        Message("tool", "21°C", tool_call_id="call_2", name="get_weather"))


def test_a_user_turn_between_assistant_items_splits_them():
    out = messages([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}])
    assert [(m.role, m.content) for m in out] == [("user", "a"), ("assistant", "b"),
                                                 ("user", "c"), ("assistant", "d")]


def test_new_items_continue_earlier_turns_and_answer_their_calls():
    earlier = (Message("user", "Weather in Paris?"),
               Message("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", "{}"),)))
    assert messages([RESULT], earlier) == (
        *earlier, Message("tool", "18°C", tool_call_id="call_1", name="get_weather"))
    assert messages("And Rome?", earlier) == (*earlier, Message("user", "And Rome?"))


@pytest.mark.parametrize(("items", "param", "words"), [
    ([{"role": "user", "content": "x"}, {**RESULT, "call_id": "call_9"}],
     "input[1].call_id", "no function_call with that call_id comes before it"),
    ([RESULT, CALL], "input[0].call_id", "comes before it"),  # a result before its call
    ([{"role": "user", "content": "x"}, {**CALL, "arguments": "{city: Paris"}],
     "input[1].arguments", "not JSON"),
    ([{"role": "user", "content": "x"}, {**CALL, "arguments": "[1]"}],
     "input[1].arguments", "must be a JSON object"),
])
def test_bad_tool_turns_name_their_item(items, param, words):
    with pytest.raises(InvalidRequestError) as e:
        messages(items)
    assert e.value.param == param and words in str(e.value)


@pytest.mark.parametrize(("fields", "where", "words"), [
    ({}, ("input",), "Field required"),
    ({"input": []}, ("input", "list"), "at least 1 item"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, ("input", "list", 0),
     "item type 'web_search_call' is not supported"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, ("input", "list", 0),
     "item type 'item_reference' is not supported"),
    ({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "what is this?"},
        {"type": "input_audio", "data": "AAAA"}]}]},
     ("input", "list", 0, "message", "content", "list", 1, "audio", "input_audio"),
     "Field required"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": [
        {"type": "input_file", "file_id": "f"}]}]},
     ("input", "list", 0, "function_call_output", "output", "list", 0, "text"),
     "input_file parts are not supported: Ember reads no files yet"),
    ({"input": [{"role": "tool", "content": "x"}]},
     ("input", "list", 0, "message", "role"), "Input should be"),
    ({"input": "x", "tool_choice": {"type": "web_search"}},
     ("tool_choice", "named"), "tool_choice forces the tool type 'web_search'"),
    ({"input": "x", "temperature": 3}, ("temperature",), "less than or equal to 2"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "x"}}},
     ("text", "format", "json_schema", "schema"), "Field required"),
])
def test_malformed_bodies_fail_validation_where_they_are_wrong(fields, where, words):
    with pytest.raises(ValidationError) as e:
        request(**fields)
    first = e.value.errors()[0]
    assert first["loc"] == where and words in first["msg"], first


def test_function_tools_and_tool_choice():
    body = request(input="x", tools=[
        {"type": "function", "name": "get_weather", "description": "Weather of a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
         "strict": True},
        {"type": "function", "name": "get_time"}],
        tool_choice={"type": "function", "name": "get_time"})
    assert [(t.name, t.description, t.parameters) for t in offered_tools(body.tools).tools] == [
        ("get_weather", "Weather of a city",
         {"type": "object", "properties": {"city": {"type": "string"}}}),
        ("get_time", "", Tool("x").parameters)]
    assert responses_tool_choice(body.tool_choice) == ToolChoice("function", "get_time")
    assert responses_tool_choice(None) == ToolChoice("auto")
    assert responses_tool_choice(request(input="x", tool_choice="required").tool_choice) \
        == ToolChoice("required")


def test_validation_paths_are_the_responses_wire_paths():
    assert responses_param("tools[1].function.parameters.properties.x") \
        == "tools[1].parameters.properties.x"
    assert responses_param("tool_choice.function.name") == "tool_choice.name"
    assert responses_param("max_output_tokens") == "max_output_tokens"
    assert responses_param(None) is None


@pytest.mark.parametrize(("effort", "thinking"), [
    (None, Thinking()), ("none", Thinking(enabled=False)),
    ("minimal", Thinking(True, "low")), ("medium", Thinking(True, "medium")),
    ("xhigh", Thinking(True, "high"))])
def test_reasoning_effort_maps_to_thinking(effort, thinking):
    assert responses_thinking(ReasoningConfig(effort=effort, summary="auto")) == thinking


def test_text_format_maps_to_json_mode_and_schema():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert responses_format(None) == (False, None)
    assert responses_format(request(input="x", text={"format": {"type": "text"}}).text) \
        == (False, None)
    assert responses_format(request(input="x", text={"verbosity": "low"}).text) == (False, None)
    assert responses_format(request(input="x", text={
        "format": {"type": "json_object"}}).text) == (True, None)
    assert responses_format(request(input="x", text={"format": {
        "type": "json_schema", "name": "a", "schema": schema, "strict": True}}).text) \
        == (True, schema)
