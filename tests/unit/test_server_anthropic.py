"""Anthropic's Messages API on Ember's app, without a model (tests/support/fake_runtime.py):
the conversation, tools, tool choice, thinking and sampling mapped into one GenerationRequest
(app.server.anthropic.inbound.anthropic_messages and friends), the answer's blocks, stop
reasons and usage whole and streamed (app.server.anthropic.wire), and errors in Anthropic's
shape with the right status on every /v1/messages path. The real models answer in
tests/integration/test_server_anthropic_real_models.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import pytest
from fastapi.testclient import TestClient

from app.config import Paths
from app.runtime import Runtime, endpoints
from app.server.anthropic.inbound import anthropic_messages
from app.server.anthropic.schemas import MessageIn, TextBlock
from app.server.app import create_app
from app.store import Store
from backends.base import (
    Message,
    ReasoningEvent,
    Thinking,
    TokenEvent,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
)
from tests.support import LOOPBACK
from tests.support.fake_openai import ANSWER, THINKING, fake_server
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served

WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
CLOCK = {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}
USER = {"role": "user", "content": "Weather in Paris?"}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18°C"}


@pytest.fixture
def fake() -> ScriptedRuntime:
    return ScriptedRuntime()


def post(fake: ScriptedRuntime, body: dict, path: str = "/v1/messages", **settings):
    with served(fake, **settings) as client:
        return client.post(path, json=body)


def asked(fake: ScriptedRuntime, **body):
    r = post(fake, {"model": MODEL, "max_tokens": 32, **body})
    assert r.status_code == 200, r.text
    return fake.requests[-1]


def refused(fake: ScriptedRuntime, body: dict, status: int = 400,
            path: str = "/v1/messages") -> str:
    """The error's message, after checking Anthropic's shape and type for the status."""
    r = post(fake, body, path)
    assert r.status_code == status, r.text
    error = r.json()
    assert set(error) == {"type", "error"} and error["type"] == "error"
    assert set(error["error"]) == {"type", "message"}
    assert error["error"]["type"] == {400: "invalid_request_error", 404: "not_found_error",
                                      429: "rate_limit_error"}[status]
    return error["error"]["message"]


# ---------------------------------------------------------------------------- the conversation
def test_system_as_a_string_or_as_text_blocks_is_the_first_message():
    user = [MessageIn(role="user", content="Hi")]
    as_text = anthropic_messages("Be brief.", user)
    as_blocks = anthropic_messages([TextBlock(type="text", text="Be brief."),
                                    TextBlock(type="text", text="Answer in French.")], user)
    assert as_text == (Message("system", "Be brief."), Message("user", "Hi"))
    assert as_blocks[0] == Message("system", "Be brief.\n\nAnswer in French.")
    assert anthropic_messages(None, user) == anthropic_messages([], user) == (
        Message("user", "Hi"),)


def test_a_tool_loop_maps_calls_thinking_and_results_in_order():
    messages = [MessageIn.model_validate(m) for m in [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Two cities.", "signature": "abc"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Let me look."}, CALL,
            {**CALL, "id": "toolu_2", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [
            RESULT,
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "timeout"}, {"type": "text", "text": "x"}]},
            {"type": "text", "text": "Thanks."}]}]]
    assert anthropic_messages(None, messages) == (
        Message("user", "Weather in Paris and Rome?"),
        Message("assistant", "Let me look.", reasoning="Two cities.", tool_calls=(
            ToolCall("toolu_1", "get_weather", '{"city": "Paris"}'),
            ToolCall("toolu_2", "get_weather", '{"city": "Rome"}'))),
        Message("tool", "18°C", tool_call_id="toolu_1", name="get_weather"),
        Message("tool", "Error: timeout\n\nx", tool_call_id="toolu_2", name="get_weather"),
        Message("user", "Thanks."))


def test_a_tool_use_input_keeps_its_unicode_and_nesting_as_json_text(fake):
    call = {**CALL, "input": {"city": "Zürich", "when": {"days": [1, 2]}}}
    req = asked(fake, tools=[WEATHER], messages=[
        USER, {"role": "assistant", "content": [call]},
        {"role": "user", "content": [RESULT]}])
    (sent,) = req.messages[1].tool_calls
    assert sent.arguments == '{"city": "Zürich", "when": {"days": [1, 2]}}'
    assert json.loads(sent.arguments) == call["input"]


@pytest.mark.parametrize(("content", "where", "why"), [
    ([{"type": "text", "text": "Read this"},
      {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}],
     "messages[0].content[1]", "document blocks are not supported yet"),
    ([CALL], "messages[0].content[0]", "a user turn cannot carry a tool_use block"),
    ([{"type": "thinking", "thinking": "hm"}], "messages[0].content[0]",
     "a user turn cannot carry a thinking block"),
    ([], "messages[0].content", "a turn needs at least one content block"),
])
def test_blocks_a_user_turn_cannot_carry_are_refused_by_their_place(fake, content, where, why):
    message = refused(fake, {"model": MODEL, "max_tokens": 8,
                             "messages": [{"role": "user", "content": content}]})
    assert message.startswith(f"{where}") and why in message, message
    assert not fake.requests  # nothing reached the model


def test_a_broken_image_inside_a_tool_result_is_refused_by_its_place(fake):
    result = {**RESULT, "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "AA"}}]}
    message = refused(fake, {"model": MODEL, "max_tokens": 8, "tools": [WEATHER], "messages": [
        USER, {"role": "assistant", "content": [CALL]}, {"role": "user", "content": [result]}]})
    assert message.startswith("messages[2].content[0].content[0].source.data is not an image "
                              "Ember reads (formats: PNG, JPEG, GIF, WEBP, BMP)"), message


def test_a_tool_result_must_answer_a_tool_use_of_the_turn_just_before(fake):
    body = {"model": MODEL, "max_tokens": 8, "tools": [WEATHER], "messages": [
        USER, {"role": "assistant", "content": [CALL]},
        {"role": "user", "content": [{**RESULT, "tool_use_id": "toolu_9"}]}]}
    assert refused(fake, body) == (
        "messages[2].content[0].tool_use_id: a tool_result for 'toolu_9', but the assistant "
        "turn just before it made no tool_use with that id (it made: toolu_1)")
    body["messages"] = [USER, {"role": "user", "content": [RESULT]}]
    assert "made no tool_use with that id (it made: none)" in refused(fake, body)


def test_an_assistant_turn_cannot_carry_a_tool_result(fake):
    message = refused(fake, {"model": MODEL, "max_tokens": 8, "messages": [
        USER, {"role": "assistant", "content": [RESULT]}]})
    assert message.startswith("messages[1].content[0]: an assistant turn cannot carry a "
                              "tool_result block")


# ---------------------------------------------------------------------------- tools and choice
def test_tools_become_tools_with_auto_choice_and_parallel_calls(fake):
    req = asked(fake, messages=[USER], tools=[WEATHER, CLOCK])
    assert [(t.name, t.description, t.parameters) for t in req.tools] == [
        ("get_weather", "Weather of a city", WEATHER["input_schema"]),
        ("get_time", "", CLOCK["input_schema"])]
    assert req.tool_choice == ToolChoice("auto") and req.parallel_tool_calls is True


@pytest.mark.parametrize(("wire", "choice", "parallel"), [
    ({"type": "auto"}, ToolChoice("auto"), True),
    ({"type": "auto", "disable_parallel_tool_use": True}, ToolChoice("auto"), False),
    ({"type": "any"}, ToolChoice("required"), True),
    ({"type": "any", "disable_parallel_tool_use": True}, ToolChoice("required"), False),
    ({"type": "tool", "name": "get_time"}, ToolChoice("function", "get_time"), True),
    ({"type": "tool", "name": "get_time", "disable_parallel_tool_use": True},
     ToolChoice("function", "get_time"), False),
    ({"type": "none"}, ToolChoice("none"), True),
])
def test_tool_choice_modes(fake, wire, choice, parallel):
    req = asked(fake, messages=[USER], tools=[WEATHER, CLOCK], tool_choice=wire)
    assert req.tool_choice == choice and req.parallel_tool_calls is parallel


@pytest.mark.parametrize(("body", "why"), [
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_stock"}},
     "tool_choice names 'get_stock', which is not among the offered tools (get_weather)"),
    ({"tool_choice": {"type": "any"}}, "tool_choice 'any' needs tools to choose from"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool"}}, "tool_choice.name: Field required"),
    ({"tools": [WEATHER], "tool_choice": {"type": "required"}},
     "tool_choice: Input tag 'required' found using 'type' does not match any of the "
     "expected tags: 'auto', 'any', 'tool', 'none'"),
    ({"tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search"}],
      "tool_choice": {"type": "tool", "name": "web_search"}},
     "tool_choice forces 'web_search', one of Anthropic's server tools"),
    ({"tools": [{"name": "get_weather"}]},
     "tools[0].input_schema: the tool 'get_weather' needs its input_schema"),
    ({"tools": [{**WEATHER, "input_schema": {"type": "array"}}]},
     "parameters must describe an object"),
])
def test_bad_tools_and_tool_choices_are_400s_naming_the_problem(fake, body, why):
    message = refused(fake, {"model": MODEL, "max_tokens": 8, "messages": [USER], **body})
    assert why in message, message


# ---------------------------------------------------------------------------- thinking, sampling
@pytest.mark.parametrize(("wire", "thinking"), [
    (None, Thinking()),
    ({"type": "enabled", "budget_tokens": 1024}, Thinking(enabled=True)),
    ({"type": "disabled"}, Thinking(enabled=False)),
    ({"type": "adaptive"}, Thinking()),  # the model decides: its own default
])
def test_thinking_switches_the_models_thinking(fake, wire, thinking):
    req = asked(fake, messages=[USER], max_tokens=2048,
                **({"thinking": wire} if wire else {}))
    assert req.thinking == thinking


@pytest.mark.parametrize(("effort", "thinking"), [
    ("low", Thinking(effort="low")), ("high", Thinking(effort="high")),
    ("xhigh", Thinking(effort="high")), ("max", Thinking(effort="high"))])
def test_output_config_effort_is_the_effort_without_switching_thinking(fake, effort,
                                                                        thinking):
    assert asked(fake, messages=[USER], output_config={"effort": effort}).thinking == thinking
    both = asked(fake, messages=[USER], max_tokens=2048, output_config={"effort": effort},
                 thinking={"type": "enabled", "budget_tokens": 1024})
    assert both.thinking == Thinking(enabled=True, effort=thinking.effort)


def test_output_config_format_constrains_the_answer_to_its_json_schema(fake):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    req = asked(fake, messages=[USER], output_config={
        "format": {"type": "json_schema", "schema": schema}})
    assert req.json_mode and req.json_schema == schema


@pytest.mark.parametrize(("thinking", "why"), [
    ({"type": "enabled", "budget_tokens": 512},
     "thinking.budget_tokens: Input should be greater than or equal to 1024"),
    ({"type": "enabled", "budget_tokens": 2048},
     "thinking.budget_tokens (2048) must be less than max_tokens (2048)"),
    ({"type": "enabled"}, "thinking.budget_tokens: Field required"),
    ({"type": "sometimes"}, "thinking: Input tag 'sometimes' found using 'type'"),
])
def test_a_thinking_budget_is_checked_as_anthropic_checks_it(fake, thinking, why):
    message = refused(fake, {"model": MODEL, "max_tokens": 2048, "messages": [USER],
                             "thinking": thinking})
    assert message.startswith(why), message


def test_sampling_fields_map_to_sampling_params(fake):
    req = asked(fake, messages=[USER], max_tokens=77, temperature=0.3, top_p=0.9, top_k=20,
                stop_sequences=["END", "\n\n"], metadata={"user_id": "u-1"})
    s = req.sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.top_k, s.stop) == (
        77, 0.3, 0.9, 20, ("END", "\n\n"))


@pytest.mark.parametrize(("body", "why"), [
    ({"messages": [USER]}, "max_tokens: Field required"),
    ({"max_tokens": 0, "messages": [USER]}, "max_tokens: Input should be greater than or "
                                            "equal to 1"),
    ({"max_tokens": 8, "messages": []}, "messages: List should have at least 1 item"),
    ({"max_tokens": 8, "messages": [{"role": "tool", "content": "x"}]},
     "messages[0].role: Input should be 'user', 'assistant' or 'system'"),
    ({"max_tokens": 8, "messages": [{"role": "system", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     "messages[0].content[0]: a system turn carries text blocks only, not tool_use"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": 3}]},
     "messages[0].content: Input should be a string or a list of content blocks"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
     "messages[0].content[0]: Input tag 'video' found using 'type' does not match"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages[0].content[0].text: Field required"),
    ({"max_tokens": 8, "temperature": 1.5, "messages": [USER]},
     "temperature: Input should be less than or equal to 1"),
    ({"max_tokens": 8, "stop_sequences": [""], "messages": [USER]},
     "stop_sequences[0]: String should have at least 1 character"),
    ({"max_tokens": 8, "stop_sequences": ["s"] * 17, "messages": [USER]},
     "stop_sequences: List should have at most 16 items"),
])
def test_malformed_bodies_are_400s_naming_the_field(fake, body, why):
    message = refused(fake, {"model": MODEL, **body})
    assert message.startswith(why), message


def test_a_body_that_is_not_json_is_a_400_in_anthropics_shape(fake):
    with served(fake) as client:
        r = client.post("/v1/messages", content=b"{not json",
                        headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "request body is not valid JSON"}}


def test_an_unknown_model_is_a_404_not_found_error(fake):
    message = refused(fake, {"model": "no-such-model", "max_tokens": 8, "messages": [USER]},
                      status=404)
    assert "no-such-model" in message


# ---------------------------------------------------------------------------- the answer
def sdk(client) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=str(client.base_url), api_key="k", http_client=client,
                               max_retries=0)


def whole_and_streamed(fake: ScriptedRuntime, **kw):
    """The answer whole, through the SDK's stream helper, and the raw streamed events."""
    body = {"model": MODEL, "max_tokens": 32, "messages": [USER], **kw}
    with served(fake) as client:
        whole = sdk(client).messages.create(**body)
        with sdk(client).messages.stream(**body) as stream:
            final = stream.get_final_message()
        raw = client.post("/v1/messages", json={**body, "stream": True})
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [(block.split("\n")[0].removeprefix("event: "),
               json.loads(block.split("\n")[1].removeprefix("data: ")))
              for block in raw.text.strip().split("\n\n")]
    assert all(data["type"] == name for name, data in events)
    assert final.model_dump(exclude={"id"}) == whole.model_dump(exclude={"id"})
    return whole, events


def test_thinking_text_and_calls_come_as_blocks_whole_and_streamed():
    fake = ScriptedRuntime(script=[
        ReasoningEvent("Paris "), ReasoningEvent("weather."), TokenEvent("Checking"),
        TokenEvent("."), ToolCallEvent(0, "", "call_ab", "get_weather"),
        ToolCallEvent(0, '{"city": '), ToolCallEvent(0, '"Paris"}'),
        ToolCallEvent(1, '{}', "call_cd", "get_time")])
    whole, events = whole_and_streamed(fake, tools=[WEATHER, CLOCK])
    assert whole.id.startswith("msg_") and whole.type == "message" and whole.model == MODEL
    assert [b.model_dump(exclude_none=True) for b in whole.content] == [
        {"type": "thinking", "thinking": "Paris weather.", "signature": ""},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_ab", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_cd", "name": "get_time", "input": {}}]
    assert (whole.stop_reason, whole.stop_sequence) == ("tool_use", None)
    assert [(name, data.get("index"), (data.get("delta") or {}).get("type"))
            for name, data in events] == [
        ("message_start", None, None), ("ping", None, None),
        ("content_block_start", 0, None), ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "thinking_delta"), ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, None), ("content_block_delta", 1, "text_delta"),
        ("content_block_delta", 1, "text_delta"), ("content_block_stop", 1, None),
        ("content_block_start", 2, None), ("content_block_delta", 2, "input_json_delta"),
        ("content_block_delta", 2, "input_json_delta"), ("content_block_stop", 2, None),
        ("content_block_start", 3, None), ("content_block_delta", 3, "input_json_delta"),
        ("content_block_stop", 3, None),
        ("message_delta", None, None), ("message_stop", None, None)]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    # the prompt's length as counted before generating (the stand-in runtime counts 7)
    assert start["usage"]["input_tokens"] == 7
    assert events[11][1]["content_block"] == {"type": "tool_use", "id": "toolu_ab",
                                              "name": "get_weather", "input": {}}
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}


@pytest.mark.parametrize(("runtime", "reason", "sequence"), [
    (ScriptedRuntime(script=[TokenEvent("Hi.")]), "end_turn", None),
    (ScriptedRuntime(script=[TokenEvent("Hi")], finish="length"), "max_tokens", None),
    (ScriptedRuntime(script=[TokenEvent("Hi")], stop_sequence="END"), "stop_sequence", "END"),
])
def test_stop_reasons_whole_and_streamed(runtime, reason, sequence):
    whole, events = whole_and_streamed(runtime, stop_sequences=["END"])
    assert (whole.stop_reason, whole.stop_sequence) == (reason, sequence)
    assert events[-2][1]["delta"] == {"stop_reason": reason, "stop_sequence": sequence}


def test_usage_counts_prompt_tokens_read_from_the_cache_apart_as_anthropic_does():
    fake = ScriptedRuntime(script=[TokenEvent("a"), TokenEvent("b")], prompt_tokens=50,
                           cached_tokens=32)
    whole, events = whole_and_streamed(fake)
    assert whole.usage.model_dump(exclude_none=True) == {
        "input_tokens": 18, "output_tokens": 2, "cache_read_input_tokens": 32,
        "cache_creation_input_tokens": 0}
    # message_start knows the prompt's length, not yet what the cache reused:
    # message_delta carries the final split
    assert events[0][1]["message"]["usage"]["input_tokens"] == 50
    assert events[-2][1]["usage"] == {"input_tokens": 18, "output_tokens": 2,
                                      "cache_read_input_tokens": 32,
                                      "cache_creation_input_tokens": 0}


def test_omitted_thinking_keeps_its_block_without_its_text():
    fake = ScriptedRuntime(script=[ReasoningEvent("secret"), TokenEvent("Hi")])
    whole, events = whole_and_streamed(fake, max_tokens=2048, thinking={
        "type": "enabled", "budget_tokens": 1024, "display": "omitted"})
    assert [b.type for b in whole.content] == ["thinking", "text"]
    assert whole.content[0].thinking == ""
    assert "secret" not in json.dumps([data for _, data in events])


def test_a_failure_mid_stream_is_an_error_event_in_anthropics_shape():
    fake = ScriptedRuntime(script=[TokenEvent("Hel")], fail="the worker crashed")
    with served(fake) as client:
        raw = client.post("/v1/messages", json={"model": MODEL, "max_tokens": 8,
                                                "messages": [USER], "stream": True})
        whole = client.post("/v1/messages", json={"model": MODEL, "max_tokens": 8,
                                                  "messages": [USER]})
    assert raw.status_code == 200
    assert raw.text.endswith('event: error\ndata: {"type": "error", "error": {"type": '
                             '"api_error", "message": "the worker crashed"}}\n\n')
    assert whole.status_code == 500 and whole.json() == {"type": "error", "error": {
        "type": "api_error", "message": "the worker crashed"}}


# ---------------------------------------------------------------------------- count_tokens
def test_count_tokens_maps_the_same_request_without_max_tokens(fake):
    with served(fake) as client:
        count = sdk(client).messages.count_tokens(
            model=MODEL, system="Be brief.", messages=[USER], tools=[WEATHER],
            tool_choice={"type": "any"}, thinking={"type": "disabled"})
    assert count.input_tokens == fake.prompt_tokens
    req = fake.requests[-1]
    assert req.messages == (Message("system", "Be brief."), Message("user", USER["content"]))
    assert req.tool_choice == ToolChoice("required") and req.thinking == Thinking(False)
    assert req.sampling.max_tokens is None


def test_count_tokens_errors_are_anthropics_too(fake):
    path = "/v1/messages/count_tokens"
    assert refused(fake, {"model": MODEL, "messages": []}, path=path).startswith(
        "messages: List should have at least 1 item")
    assert "no-such-model" in refused(fake, {"model": "no-such-model", "messages": [USER]},
                                      status=404, path=path)


# ---------------------------------------------------------------------------- the server's rules
def test_the_key_comes_as_x_api_key_and_a_refusal_is_anthropics_401(fake):
    body = {"model": MODEL, "max_tokens": 8, "messages": [USER]}
    with served(fake, api_key="s3cret") as client:
        missing = client.post("/v1/messages", json=body)
        wrong = client.post("/v1/messages/count_tokens", json=body,
                            headers={"x-api-key": "nope"})
        right = client.post("/v1/messages", json=body, headers={
            "x-api-key": "s3cret", "anthropic-version": "2099-01-01", "anthropic-beta": "x"})
        openai_path = client.post("/v1/chat/completions", json=body)
    assert missing.status_code == wrong.status_code == 401
    for r in (missing, wrong):
        assert r.json() == {"type": "error", "error": {
            "type": "authentication_error",
            "message": "missing or wrong API key: send 'Authorization: Bearer KEY' (or "
                       "'x-api-key: KEY')"}}
    assert right.status_code == 200 and right.json()["type"] == "message"
    assert openai_path.status_code == 401 and openai_path.json()["error"]["code"] == \
        "invalid_api_key"  # other paths keep their own shape


def test_a_body_over_the_limit_is_anthropics_413(fake):
    r = post(fake, {"model": MODEL, "max_tokens": 8, "messages": [
        {"role": "user", "content": "x" * 4000}]}, max_body_bytes=1000)
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "request_too_large"


def test_a_full_queue_is_anthropics_429_rate_limit_error(fake):
    with served(fake, parallel=0, queue_limit=0) as client:
        r = client.post("/v1/messages", json={"model": MODEL, "max_tokens": 8,
                                              "messages": [USER]})
    assert r.status_code == 429 and r.headers["retry-after"]
    assert r.json()["error"]["type"] == "rate_limit_error"


def test_the_openapi_document_describes_the_routes_and_their_errors(fake):
    with served(fake) as client:
        doc = client.get("/openapi.json").json()
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        responses = doc["paths"][path]["post"]["responses"]
        assert {"200", "400", "401", "404", "413", "429", "500"} <= set(responses)
        assert responses["400"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/AnthropicErrorResponse"}
    assert "text/event-stream" in doc["paths"]["/v1/messages"]["post"]["responses"]["200"][
        "content"]
    request = doc["components"]["schemas"]["MessagesRequest"]
    assert {"model", "messages", "max_tokens"} <= set(request["required"])
    # validation errors are 400s in the route's shape: no route documents a 422
    assert not [p for p, ops in doc["paths"].items() for op in ops.values()
                if "422" in op["responses"]]



# ---------------------------------------------------------------------------- remote models
@pytest.fixture
def remote_app(tmp_path) -> Iterator[TestClient]:
    """The app on a real Runtime whose endpoint `fake` is tests/support/fake_openai.py."""
    with fake_server() as url:
        paths = Paths(tmp_path / "home")
        endpoints.add("fake", url, paths=paths)
        with TestClient(create_app(Runtime(store=Store(paths))),
                        base_url=LOOPBACK) as client:
            yield client


def test_a_remote_models_thinking_and_stop_reach_anthropic_blocks(remote_app):
    whole = sdk(remote_app).messages.create(model="fake/think", max_tokens=32, messages=[USER])
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None))
            for b in whole.content] == [("thinking", "".join(THINKING)),
                                        ("text", "".join(ANSWER))]
    assert whole.stop_reason == "end_turn" and whole.usage.input_tokens == 12


def test_counting_a_remote_models_prompt_is_a_400_that_says_why(remote_app):
    r = remote_app.post("/v1/messages/count_tokens", json={"model": "fake/ok",
                                                           "messages": [USER]})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "type": "invalid_request_error",
        "message": "fake/ok is a remote model: its server renders and tokenizes its prompts, "
                   "and Ember cannot count them for it (counting runs on local models only)"}
