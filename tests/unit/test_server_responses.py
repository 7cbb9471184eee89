"""POST/GET/DELETE /v1/responses on the real app over a scripted runtime: the response object
and every stream event parse as the official openai SDK's types, a streamed response ends as
the whole one, max_output_tokens makes it incomplete, previous_response_id continues exactly
what re-sending the items would, the store's bounds, and errors in OpenAI's shape."""

from __future__ import annotations

import json

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from app.server.responses.schemas import ResponseObject
from app.server.responses.store import ResponseStore
from backends.base import Message, ReasoningEvent, TokenEvent, ToolCall, ToolCallEvent
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served

WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
THOUGHT_TEXT_CALL = [ReasoningEvent("Paris, "), ReasoningEvent("so call it."),
                     TokenEvent("Let me "), TokenEvent("check."),
                     ToolCallEvent(0, "", "call_1", "get_weather"),
                     ToolCallEvent(0, "{\"city\": "), ToolCallEvent(0, "\"Paris\"}")]
STREAM_EVENTS = TypeAdapter(ResponseStreamEvent)


def sse(body: str) -> list[dict]:
    """The stream's events; each `event:` line names its data's type."""
    events = []
    for block in body.strip().split("\n\n"):
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        events.append(event)
    return events


def without_ids(response: dict) -> dict:
    out = {k: v for k, v in response.items() if k not in ("id", "created_at", "completed_at")}
    out["output"] = [{k: v for k, v in item.items() if k != "id"}
                     for item in response["output"]]
    return out


def test_whole_and_streamed_responses_parse_as_the_sdk_types_and_agree():
    fake = ScriptedRuntime(script=THOUGHT_TEXT_CALL)
    with served(fake) as client:
        body = {"model": MODEL, "input": "Weather in Paris?", "tools": [WEATHER]}
        whole = client.post("/v1/responses", json=body).json()
        streamed = client.post("/v1/responses", json={**body, "stream": True})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    Response.model_validate(whole)  # strict: every required field, every literal
    ResponseObject.model_validate(whole)  # what the OpenAPI document says
    assert "output_text" not in whole and whole["status"] == "completed"
    assert [item["type"] for item in whole["output"]] == ["reasoning", "message",
                                                          "function_call"]
    reasoning, message, call = whole["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Paris, so call it."}]
    assert reasoning["summary"] == [] and reasoning["id"].startswith("rs_")
    assert message["content"] == [{"type": "output_text", "text": "Let me check.",
                                   "annotations": []}]
    assert message["id"].startswith("msg_") and message["status"] == "completed"
    assert (call["call_id"], call["name"], call["arguments"], call["status"]) == (
        "call_1", "get_weather", "{\"city\": \"Paris\"}", "completed")
    assert call["id"].startswith("fc_")
    assert whole["usage"] == {"input_tokens": 7, "output_tokens": 7, "total_tokens": 14,
                              "input_tokens_details": {"cached_tokens": 0,
                                                       "cache_write_tokens": 0},
                              "output_tokens_details": {"reasoning_tokens": 2}}

    events = sse(streamed.text)
    for event in events:
        STREAM_EVENTS.validate_python(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"]
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []
    final = events[-1]["response"]
    assert without_ids(final) == without_ids(whole)
    done_items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done_items == final["output"]
    deltas = [e for e in events if e["type"].endswith(".delta")]
    assert {(e["item_id"], e["output_index"]) for e in deltas} == {
        (item["id"], i) for i, item in enumerate(final["output"])}


def test_the_sdk_stream_helper_and_create_read_the_answer():
    fake = ScriptedRuntime(script=[TokenEvent("Hello"), TokenEvent(" there")])
    with served(fake) as client:
        oai = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="k", http_client=client)
        whole = oai.responses.create(model=MODEL, input="Hi", instructions="Be kind.")
        with oai.responses.stream(model=MODEL, input="Hi") as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
    assert whole.output_text == final.output_text == "Hello there"
    assert deltas == ["Hello", " there"] and whole.instructions == "Be kind."
    assert fake.requests[0].messages == (Message("system", "Be kind."), Message("user", "Hi"))


def test_max_output_tokens_makes_an_incomplete_response_whole_and_streamed():
    fake = ScriptedRuntime(script=[TokenEvent("One two")], finish="length")
    with served(fake) as client:
        body = {"model": MODEL, "input": "Count", "max_output_tokens": 2}
        whole = client.post("/v1/responses", json=body).json()
        events = sse(client.post("/v1/responses", json={**body, "stream": True}).text)
    assert fake.requests[0].sampling.max_tokens == 2
    assert whole["status"] == "incomplete"
    assert whole["incomplete_details"] == {"reason": "max_output_tokens"}
    assert whole["output"][0]["status"] == "incomplete" and whole["completed_at"] is None
    assert events[-1]["type"] == "response.incomplete"
    assert without_ids(events[-1]["response"]) == without_ids(whole)


def test_a_call_cut_off_by_max_output_tokens_is_closed_then_left_out():
    fake = ScriptedRuntime(script=[ToolCallEvent(0, "{\"city\": \"Pa", "call_1",
                                                 "get_weather")],
                           finish="length", cut_call=True)
    with served(fake) as client:
        body = {"model": MODEL, "input": "Weather?", "tools": [WEATHER],
                "max_output_tokens": 5}
        whole = client.post("/v1/responses", json=body).json()
        events = sse(client.post("/v1/responses", json={**body, "stream": True}).text)
    assert whole["status"] == "incomplete" and whole["output"] == []
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [(i["type"], i["status"]) for i in done] == [("function_call", "incomplete")]
    assert events[-1]["response"]["output"] == []


def test_a_failure_mid_stream_is_an_error_event_then_response_failed():
    fake = ScriptedRuntime(script=[TokenEvent("Half")], fail="the worker crashed")
    with served(fake) as client:
        events = sse(client.post("/v1/responses", json={
            "model": MODEL, "input": "Hi", "stream": True}).text)
        whole = client.post("/v1/responses", json={"model": MODEL, "input": "Hi"})
    for event in events:
        STREAM_EVENTS.validate_python(event)
    error, failed = events[-2:]
    assert error["type"] == "error" and error["message"] == "the worker crashed"
    assert failed["type"] == "response.failed"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "server_error",
                                           "message": "the worker crashed"}
    assert failed["response"]["output"][0]["content"][0]["text"] == "Half"
    assert whole.status_code == 500 and whole.json()["error"]["message"] == "the worker crashed"


def test_previous_response_id_continues_as_re_sending_the_items_would():
    fake = ScriptedRuntime(script=THOUGHT_TEXT_CALL)
    with served(fake) as client:
        first = client.post("/v1/responses", json={
            "model": MODEL, "input": "Weather in Paris?", "tools": [WEATHER],
            "instructions": "Use tools."}).json()
        result = {"type": "function_call_output", "call_id": "call_1", "output": "18°C"}
        fake.script = [TokenEvent("18°C in Paris.")]
        chained = client.post("/v1/responses", json={
            "model": MODEL, "input": [result], "tools": [WEATHER],
            "previous_response_id": first["id"]}).json()
        by_id = fake.requests[-1].messages
        resent = client.post("/v1/responses", json={
            "model": MODEL, "tools": [WEATHER],
            "input": [{"role": "user", "content": "Weather in Paris?"}, *first["output"],
                      result]}).json()
        assert fake.requests[-1].messages == by_id
    # instructions are not carried over to the next response (OpenAI's rule)
    assert by_id == (
        Message("user", "Weather in Paris?"),
        Message("assistant", "Let me check.", reasoning="Paris, so call it.",
                tool_calls=(ToolCall("call_1", "get_weather", "{\"city\": \"Paris\"}"),)),
        Message("tool", "18°C", tool_call_id="call_1", name="get_weather"))
    assert chained["previous_response_id"] == first["id"]
    assert chained["output"][0]["content"][0]["text"] == resent["output"][0]["content"][0][
        "text"] == "18°C in Paris."


def test_a_call_with_broken_arguments_is_stored_and_refused_when_continued():
    # a remote server's model may send anything as arguments: the answer is still stored,
    # and the turn that carries it on is refused, saying why
    fake = ScriptedRuntime(script=[ToolCallEvent(0, "{city: Paris", "call_1", "get_weather")])
    with served(fake) as client:
        first = client.post("/v1/responses", json={"model": MODEL, "input": "Weather?",
                                                   "tools": [WEATHER]})
        assert first.status_code == 200
        assert first.json()["output"][0]["arguments"] == "{city: Paris"
        r = client.post("/v1/responses", json={
            "model": MODEL, "tools": [WEATHER], "previous_response_id": first.json()["id"],
            "input": [{"type": "function_call_output", "call_id": "call_1", "output": "x"}]})
    assert r.status_code == 400 and "are not JSON" in r.json()["error"]["message"]
    assert len(fake.requests) == 1


def test_store_get_delete_and_unknown_ids_in_openai_shape():
    fake = ScriptedRuntime(script=[TokenEvent("Hi")])
    with served(fake) as client:
        kept = client.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                  "metadata": {"k": "v"}}).json()
        unkept = client.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                    "store": False}).json()
        assert kept["store"] is True and unkept["store"] is False
        assert client.get(f"/v1/responses/{kept['id']}").json() == kept
        for response_id in (unkept["id"], "resp_nope"):
            r = client.get(f"/v1/responses/{response_id}")
            assert r.status_code == 404 and response_id in r.json()["error"]["message"]
            r = client.post("/v1/responses", json={"model": MODEL, "input": "y",
                                                   "previous_response_id": response_id})
            assert r.status_code == 404
            assert r.json()["error"] == {
                "message": r.json()["error"]["message"], "type": "invalid_request_error",
                "param": "previous_response_id", "code": "previous_response_not_found"}
            assert response_id in r.json()["error"]["message"]
        r = client.delete(f"/v1/responses/{kept['id']}")
        assert r.status_code == 200
        assert r.json() == {"id": kept["id"], "object": "response", "deleted": True}
        assert client.get(f"/v1/responses/{kept['id']}").status_code == 404
        assert client.delete(f"/v1/responses/{kept['id']}").status_code == 404


def test_the_store_forgets_the_oldest_past_its_count_and_age():
    now = [0.0]
    store = ResponseStore(max_responses=2, max_age_s=60, clock=lambda: now[0])
    for i in range(3):
        store.put(f"r{i}", {}, ())
        now[0] += 10
    assert store.get("r0") is None and store.get("r1") is not None and len(store) == 2
    now[0] = 10 + 60.5  # r1 stored at 10 is now older than 60 s, r2 (at 20) is not
    assert store.get("r1") is None and store.get("r2") is not None
    assert store.delete("r2") and not store.delete("r2")


BAD = [  # (body, status, param, words)
    ({"model": MODEL}, 400, "input", "Field required"),
    ({"model": MODEL, "input": [{"type": "computer_call", "id": "c"}]}, 400, "input[0]",
     "item type 'computer_call' is not supported"),
    ({"model": MODEL, "input": [{"role": "user", "content": "x"}, {
        "type": "function_call_output", "call_id": "call_9", "output": "x"}]},
     400, "input[1].call_id", "no function_call with that call_id"),
    ({"model": MODEL, "input": "x", "tools": [WEATHER], "tool_choice": {
        "type": "file_search"}}, 400, "tool_choice", "forces the tool type 'file_search'"),
    ({"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://x/y.png"}]}]}, 400,
     "input[0].content[0].image_url", "this server does not fetch image URLs"),
    ({"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_file", "file_id": "file_1"}]}]}, 400,
     "input[0].content[0]", "input_file parts are not supported"),
    ({"model": MODEL, "input": "x", "temperature": 3}, 400, "temperature",
     "less than or equal to 2"),
    ({"model": MODEL, "input": "x", "tools": [WEATHER],
      "tool_choice": {"type": "function", "name": "get_time"}}, 400, "tool_choice.name",
     "'get_time', which is not among the offered tools (get_weather)"),
    ({"model": MODEL, "input": "x", "tools": [{**WEATHER, "parameters": {
        "type": "object", "properties": {"x": 3}}}]}, 400, "tools[0].parameters.properties.x",
     "not a valid JSON schema"),
    ({"model": MODEL, "input": "x", "reasoning": {"effort": "extreme"}}, 400,
     "reasoning.effort", "Input should be"),
    ({"model": MODEL, "input": "x", "background": True}, 400, "background",
     "background responses are not supported"),
    ({"model": "nope", "input": "x"}, 404, None, "nope"),
]


@pytest.mark.parametrize(("body", "status", "param", "words"), BAD)
def test_bad_requests_are_errors_in_openai_shape_that_say_what_is_wrong(body, status, param,
                                                                        words):
    fake = ScriptedRuntime(script=[TokenEvent("ok")])
    with served(fake) as client:
        r = client.post("/v1/responses", json=body)
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error" and error["param"] == param
        assert words in error["message"], error["message"]
        assert fake.requests == []
        ok = client.post("/v1/responses", json={"model": MODEL, "input": "x"})
        assert ok.status_code == 200 and ok.json()["output"][0]["content"][0]["text"] == "ok"


def test_a_body_that_is_not_json_is_a_400():
    with served(ScriptedRuntime()) as client:
        r = client.post("/v1/responses", content=b"{not json",
                        headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "request body is not valid JSON"


def test_include_and_codex_fields_are_accepted():
    fake = ScriptedRuntime(script=[TokenEvent("ok")])
    with served(fake) as client:
        r = client.post("/v1/responses", json={
            "model": MODEL, "input": [
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "hi"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [],
                 "encrypted_content": "gAAAA"}],
            "include": ["reasoning.encrypted_content"], "store": False, "stream": False,
            "prompt_cache_key": "abc", "reasoning": {"effort": "low", "summary": "auto"},
            "text": {"verbosity": "low"}, "parallel_tool_calls": False,
            "tool_choice": "auto", "tools": []})
    assert r.status_code == 200, r.text
    assert r.json()["reasoning"] == {"effort": "low", "summary": "auto"}
    assert fake.requests[0].thinking.enabled is True
    # OpenAI's reasoning item, encrypted, says nothing Ember's model can read
    assert fake.requests[0].messages == (Message("user", "hi"),)


def test_the_openapi_document_describes_the_routes():
    with served(ScriptedRuntime()) as client:
        doc = client.get("/openapi.json").json()
    post = doc["paths"]["/v1/responses"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ResponseCreateRequest")
    assert post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"] \
        .endswith("/ResponseObject")
    for status in ("400", "401", "404", "429", "500"):
        assert post["responses"][status]["content"]["application/json"]["schema"][
            "$ref"].endswith("/ErrorResponse")
    assert set(doc["paths"]["/v1/responses/{response_id}"]) == {"get", "delete"}
