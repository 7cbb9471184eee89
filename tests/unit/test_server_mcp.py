"""`ember serve --mcp` apart from any MCP server or model: how a request asks for servers, the
400 of a server started without --mcp, which tools may run, and the pieces of the loop's
rounds (what the client sees of a round, the next round's request, the final usage)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.mcp.approvals import Approvals
from app.mcp.config import McpConfigError, McpServerConfig
from app.mcp.connections import McpTool
from app.mcp.tool_loop import DEFAULT_SYSTEM, STEP_LIMIT, TOOLS_NOTE, ToolIndex, next_step
from app.server.generation_request import LEFT_OUT_HEADER
from app.server.mcp_rounds import RoundFilter, after_calls, combined, split_calls, with_mcp_tools
from app.server.server_tools import MAX_REASON, McpAsk, ServerTools, left_out_entry, parse_ask
from backends.base import (
    DoneEvent,
    GenerationRequest,
    Message,
    ReasoningEvent,
    Stats,
    TokenEvent,
    Tool,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
)
from backends.errors import InvalidRequestError
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served
from tests.support.mcp_server import command
from tests.support.scripted_rounds import Rounds, call

USER = {"role": "user", "content": "Weather in Paris?"}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
INDEX = ToolIndex.of([McpTool("weather", "get_weather", "Weather", CITY),
                      McpTool("weather", "add", "Add", {})])


def test_a_request_asks_with_mcp_or_lm_studios_integrations():
    assert parse_ask({"model": "m"}) is None
    assert parse_ask({"mcp": False}) is None and parse_ask({"integrations": None}) is None
    assert parse_ask({"mcp": True}) == McpAsk(None)
    assert parse_ask({"mcp": ["files", "search", "files"]}) == McpAsk(("files", "search"))
    assert parse_ask({"integrations": ["mcp/files", {
        "type": "plugin", "id": "mcp/search", "allowed_tools": ["find"]}]}) == McpAsk(
        ("files", "search"), {"search": frozenset({"find"})})


@pytest.mark.parametrize(("body", "words"), [
    ({"mcp": "files"}, "true (every enabled server"),
    ({"mcp": []}, "list of server names"),
    ({"mcp": [3]}, "list of server names"),
    ({"mcp": True, "integrations": ["mcp/a"]}, "not both"),
    ({"integrations": "mcp/files"}, "must be a list"),
    ({"integrations": ["files"]}, 'named "mcp/NAME"'),
    ({"integrations": [{"type": "ephemeral_mcp", "server_url": "https://x"}]},
     "'ephemeral_mcp' is not supported"),
    ({"integrations": [{"id": "mcp/a", "allowed_tools": "find"}]}, "allowed_tools must be"),
])
def test_a_malformed_ask_says_what_is_wrong(body, words):
    with pytest.raises(InvalidRequestError) as error:
        parse_ask(body)
    assert words in str(error.value)


@pytest.mark.parametrize(("path", "body", "shape"), [
    ("/v1/chat/completions", {"mcp": True}, "openai"),
    ("/v1/chat/completions", {"integrations": ["mcp/weather"]}, "openai"),
    ("/v1/messages", {"mcp": ["weather"], "max_tokens": 20}, "anthropic"),
    ("/api/chat", {"mcp": True}, "ollama"),
])
def test_without_mcp_a_request_that_asks_is_a_400_that_names_the_flag(path, body, shape):
    fake = ScriptedRuntime(script=[TokenEvent("ok")])
    with served(fake) as client:
        r = client.post(path, json={"model": MODEL, "messages": [USER]} | body)
        assert r.status_code == 400, r.text
        message = {"openai": lambda j: j["error"]["message"],
                   "anthropic": lambda j: j["error"]["message"],
                   "ollama": lambda j: j["error"]}[shape](r.json())
        assert "started without --mcp" in message and "ember serve --mcp" in message
        assert fake.requests == []  # nothing ran
        # the same request without the ask is answered
        plain = {k: v for k, v in body.items() if k not in ("mcp", "integrations")}
        assert client.post(path, json={"model": MODEL, "messages": [USER]} | plain
                           ).status_code == 200


def test_with_mcp_a_route_without_chats_refuses_the_ask(tmp_path: Path):
    with served(ScriptedRuntime(), mcp=True, mcp_home=tmp_path) as client:
        r = client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "mcp": True})
        assert r.status_code == 400 and "chat requests only" in r.json()["error"]["message"]
        r = client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [USER], "mcp": ["nope"]})
        assert r.status_code == 400
        assert "MCP server 'nope' is not in" in r.json()["error"]["message"]


WEATHER = McpServerConfig("weather", command="weather-server")


def test_only_tools_allowed_always_or_by_mcp_allow_may_run(tmp_path: Path):
    tools = ServerTools(tmp_path, allow=("weather/add", "files/*"))
    try:
        assert tools.allowed(WEATHER, "add")
        assert not tools.allowed(WEATHER, "get_weather")
        assert tools.allowed(McpServerConfig("files", command="fs"), "read")
        Approvals(tmp_path / "mcp-approvals.json").allow_always(WEATHER, "get_weather")
        assert tools.allowed(WEATHER, "get_weather")
        # an approval holds for the server as it was defined (a new command asks again)
        assert not tools.allowed(McpServerConfig("weather", command="other"), "get_weather")
    finally:
        tools.close()
    with pytest.raises(McpConfigError, match="SERVER/TOOL"):
        ServerTools(tmp_path, allow=("weather",))


def test_the_window_and_the_server_stop_the_loop_by_the_same_rule():
    paris, oslo = ToolCall("c1", "get_weather", '{"city":"Paris"}'), \
        ToolCall("c2", "get_weather", '{"city": "Oslo"}')
    made = {("get_weather", '{"city": "Paris"}')}
    assert next_step((), made, False, 0) == "answer"
    assert next_step((paris,), set(), False, 0) == "run"
    assert next_step((paris,), made, False, 1) == "ask_for_words"  # spacing does not matter
    assert next_step((paris,), made, True, 1) == "run"
    assert next_step((paris, oslo), made, False, 1) == "run"
    assert next_step((oslo,), made, False, STEP_LIMIT) == "step_limit"


def test_mcp_tools_go_after_the_clients_and_a_shared_name_is_a_400():
    mine = Tool("lookup", "", {"type": "object", "properties": {}})
    request = GenerationRequest(messages=(Message("user", "hi"),), tools=(mine,))
    offered = with_mcp_tools(request, INDEX)
    assert [t.name for t in offered.tools] == ["lookup", "get_weather", "add"]
    # the window's note, so a small model answers from a result instead of calling again
    assert offered.messages == (Message("system", f"{DEFAULT_SYSTEM} {TOOLS_NOTE}"),
                                Message("user", "hi"))
    told = GenerationRequest(messages=(Message("system", "Be brief."), Message("user", "hi")))
    assert with_mcp_tools(told, INDEX).messages[0].content == f"Be brief. {TOOLS_NOTE}"
    clash = GenerationRequest(messages=(Message("user", "hi"),), tools=(Tool("add"),))
    with pytest.raises(InvalidRequestError, match="both one of this request's tools and MCP "
                                                  "server weather's"):
        with_mcp_tools(clash, INDEX)


def test_a_round_shows_the_client_its_own_calls_only_numbered_from_zero():
    keep = RoundFilter(INDEX)
    events = [TokenEvent("Let me look."),
              ToolCallEvent(0, id="c1", name="get_weather"), ToolCallEvent(0, '{"city": "P"}'),
              ToolCallEvent(1, id="c2", name="lookup"), ToolCallEvent(1, "{}")]
    shown = [out for e in events for out in keep(e)]
    assert shown == [TokenEvent("Let me look."), ToolCallEvent(0, id="c2", name="lookup"),
                     ToolCallEvent(0, "{}")]
    calls = (ToolCall("c1", "get_weather", "{}"), ToolCall("c2", "lookup", "{}"))
    assert split_calls(calls, INDEX) == ((calls[0],), (calls[1],))


def test_a_later_rounds_text_and_thinking_follow_a_blank_line():
    keep = RoundFilter(INDEX, text_before="Checking.", reasoning_before="hmm")
    assert keep(ReasoningEvent("ok")) == [ReasoningEvent("\n\n"), ReasoningEvent("ok")]
    assert keep(TokenEvent("It is")) == [TokenEvent("\n\n"), TokenEvent("It is")]
    assert keep(TokenEvent(" foggy.")) == [TokenEvent(" foggy.")]
    assert RoundFilter(INDEX, text_before="")(TokenEvent("x")) == [TokenEvent("x")]


def stats(prompt: int, completion: int, reason: str = "stop") -> Stats:
    return Stats(prompt, completion, ttft_s=0.5, decode_tokens_per_s=20.0,
                 finish_reason=reason, truncated=False, total_s=1.0)  # type: ignore[arg-type]


def test_the_next_round_has_the_calls_and_results_and_is_no_longer_forced():
    call = ToolCall("c1", "get_weather", '{"city": "Paris"}')
    first = GenerationRequest(messages=(Message("user", "Paris?"),),
                              tools=INDEX.request_tools(), tool_choice=ToolChoice("required"))
    done = DoneEvent(stats(40, 9, "tool_calls"), "", "", (call,))
    after = after_calls(first, done, (call,), ["Paris: 27°C and thick fog"])
    assert after.messages[1:] == (
        Message("assistant", "", "", (call,)),
        Message("tool", "Paris: 27°C and thick fog", tool_call_id="c1", name="get_weather"))
    assert after.tool_choice == ToolChoice("auto") and after.id != first.id
    after.validate()  # a request the backends take


def test_the_final_event_sums_the_rounds_usage_and_keeps_the_last_finish():
    dones = [DoneEvent(stats(40, 9, "tool_calls"), ""), DoneEvent(stats(60, 5), "Foggy.")]
    final = combined(dones, "Foggy.", "", (), (), seconds=3.0)
    assert (final.stats.prompt_tokens, final.stats.completion_tokens) == (100, 14)
    assert final.stats.finish_reason == "stop" and final.stats.total_s == 3.0
    assert final.text == "Foggy." and final.tool_calls == ()


def test_mcp_allow_without_mcp_is_refused_and_without_mcp_nothing_is_started(tmp_path: Path):
    from app.server.server_tools import start

    assert start(False, tmp_path, ()) is None
    with pytest.raises(McpConfigError, match="--mcp-allow needs --mcp"):
        start(False, tmp_path, ("weather/add",))


# ---- issue 38's gaps, through the real app and a real MCP server (tests/support/mcp_server)
GONE = {"command": "/nonexistent/ember-test-mcp-server"}  # fails to start at once


@pytest.fixture(scope="module")
def weather(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Rounds]]:
    """A server with --mcp: a real weather server (get_weather allowed, add not) and one
    whose command does not exist; the model scripted per round."""
    home = tmp_path_factory.mktemp("mcp-gaps")
    (home / "mcp.json").write_text(json.dumps({"mcpServers": {
        "weather": command(), "gone": GONE}}))
    model = Rounds()
    with served(model, mcp=True, mcp_home=home, mcp_allow=("weather/get_weather",)) as client:
        yield client, model


GONE_LINE = ("MCP server gone could not be started ([Errno 2] No such file or directory: "
             "'/nonexistent/ember-test-mcp-server')")


def test_with_mcp_true_a_server_that_cannot_start_is_left_out_and_named(
        weather, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    client, model = weather
    model.play([TokenEvent("Foggy.")])
    with caplog.at_level(logging.WARNING, logger="app.server.server_tools"):
        r = client.post("/v1/responses", json={
            "model": MODEL, "input": "Weather?", "mcp": True, "tools": [{"type": "web_search"}]})
    assert r.status_code == 200, r.text
    # named after the hosted tool the route left out, in the same header
    assert r.headers[LEFT_OUT_HEADER] == f"web_search, mcp:gone ({GONE_LINE})"
    assert [t.name for t in model.requests[0].tools] == ["get_weather", "add"]
    assert f"MCP server gone left out of this request: {GONE_LINE}" in caplog.text
    # a server the request names is still a 502: the client asked for it
    r = client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [USER], "mcp": ["weather", "gone"]})
    assert r.status_code == 502 and r.json()["error"]["message"] == GONE_LINE
    # a request all of whose servers failed is a 502 with their lines
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"a": GONE, "b": GONE}}))
    with served(ScriptedRuntime(), mcp=True, mcp_home=tmp_path) as alone:
        r = alone.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [USER], "mcp": True})
    assert r.status_code == 502
    assert r.json()["error"]["message"] == "; ".join(
        GONE_LINE.replace("server gone", f"server {n}") for n in "ab")


def test_a_left_out_servers_line_fits_a_comma_separated_header():
    assert left_out_entry("files", "could not start:\n  bad, worse ☃") == \
        "mcp:files (could not start: bad; worse ?)"
    long = left_out_entry("x", "y" * 500)
    assert len(long) == len("mcp:x ()") + MAX_REASON and long.endswith("...)")


def _ask(path: str, extra: dict) -> dict:
    if path == "/v1/messages":
        return {"model": MODEL, "max_tokens": 50, "messages": [USER]} | extra
    if path == "/v1/responses":
        return {"model": MODEL, "input": "Weather in Paris?"} | extra
    return {"model": MODEL, "messages": [USER]} | extra


@pytest.mark.parametrize(("path", "choice", "first"), [
    ("/v1/messages", {"type": "any"}, ToolChoice("required")),
    ("/v1/messages", {"type": "tool", "name": "get_weather"},
     ToolChoice("function", "get_weather")),
    ("/v1/responses", "required", ToolChoice("required")),
    ("/v1/responses", {"type": "function", "name": "get_weather"},
     ToolChoice("function", "get_weather")),
])
def test_a_forced_choice_can_be_met_by_mcp_tools_alone_for_the_first_round(
        weather, path, choice, first):
    client, model = weather
    model.play([call(0, "get_weather", {"city": "Paris"})], [TokenEvent("Foggy.")])
    r = client.post(path, json=_ask(path, {"mcp": ["weather"], "tool_choice": choice}))
    assert r.status_code == 200, r.text
    forced, after = model.requests
    assert [t.name for t in forced.tools] == ["get_weather", "add"]  # no client tools
    assert forced.tool_choice == first and after.tool_choice == ToolChoice("auto")


@pytest.mark.parametrize(("path", "choice"), [
    ("/v1/messages", {"type": "tool", "name": "nope"}),
    ("/v1/responses", {"type": "function", "name": "nope"}),
    ("/v1/chat/completions", {"type": "function", "function": {"name": "nope"}}),
])
def test_forcing_a_tool_neither_the_client_nor_mcp_offers_is_a_400_naming_it(
        weather, path, choice):
    client, model = weather
    model.play()
    r = client.post(path, json=_ask(path, {"mcp": ["weather"], "tool_choice": choice}))
    assert r.status_code == 400, r.text
    assert "tool_choice names 'nope', which is not among the offered tools (add, " \
           "get_weather)" in r.json()["error"]["message"]
    assert model.requests == []


CHECKING = [TokenEvent("Checking."), call(0, "get_weather", {"city": "Rome"}),
            call(1, "add", {"a": 1, "b": 2})]


def test_a_responses_client_sees_each_mcp_call_as_an_mcp_call_item(weather):
    import openai

    client, model = weather
    model.play(CHECKING, [TokenEvent("Rome is foggy.")])
    oai = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="k", http_client=client)
    answer = oai.responses.create(model=MODEL, input="Weather in Rome?",
                                  extra_body={"mcp": ["weather"]})
    assert [item.type for item in answer.output] == ["message", "mcp_call", "mcp_call",
                                                     "message"]
    weather_call, add_call = answer.output[1], answer.output[2]
    assert (weather_call.server_label, weather_call.name, weather_call.arguments,
            weather_call.output, weather_call.error, weather_call.status) == (
        "weather", "get_weather", '{"city": "Rome"}', "Rome: 27°C and thick fog", None,
        "completed")
    assert add_call.output is None and add_call.status == "failed"
    assert add_call.error.type == "mcp_tool_execution_error"
    refused = add_call.error.content[0]["text"]
    assert "add was not run" in refused and "--mcp-allow weather/add" in refused
    assert answer.output_text == "Checking.Rome is foggy."
    # the next turn has the calls and their results, stored or sent back as input
    model.play([TokenEvent("Sunny.")], [TokenEvent("Sunny.")])
    oai.responses.create(model=MODEL, input="And tomorrow?", previous_response_id=answer.id)
    oai.responses.create(model=MODEL, input=[
        {"role": "user", "content": "Weather in Rome?"},
        *[item.model_dump() for item in answer.output],
        {"role": "user", "content": "And tomorrow?"}])
    for request in model.requests:
        assert [(m.role, m.content, [c.name for c in m.tool_calls])
                for m in request.messages[1:]] == [
            ("assistant", "Checking.", ["get_weather"]),
            ("tool", "Rome: 27°C and thick fog", []), ("assistant", "", ["add"]),
            ("tool", refused, []), ("assistant", "Rome is foggy.", []),
            ("user", "And tomorrow?", [])]
    # the other dialects do not show the calls: one answer, a blank line between rounds
    model.play(CHECKING, [TokenEvent("Rome is foggy.")])
    r = client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [USER], "mcp": ["weather"]})
    message = r.json()["choices"][0]["message"]
    assert message["content"] == "Checking.\n\nRome is foggy." and not message.get("tool_calls")


def test_a_responses_stream_builds_each_mcp_call_item_with_openais_events(weather):
    client, model = weather
    model.play(CHECKING, [TokenEvent("Rome is foggy.")])
    with client.stream("POST", "/v1/responses", json={
            "model": MODEL, "input": "Weather in Rome?", "mcp": ["weather"],
            "stream": True}) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    mcp = [(e["type"], e.get("output_index")) for e in events
           if "mcp_call" in e["type"] or e.get("item", {}).get("type") == "mcp_call"]
    life = ["response.output_item.added", "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done", "response.mcp_call.in_progress"]
    assert mcp == [*((kind, 1) for kind in life), ("response.mcp_call.completed", 1),
                   ("response.output_item.done", 1),
                   *((kind, 2) for kind in life), ("response.mcp_call.failed", 2),
                   ("response.output_item.done", 2)]
    added = next(e for e in events if e["type"] == "response.output_item.added"
                 and e["output_index"] == 1)["item"]
    assert added["status"] == "in_progress" and added["output"] is None
    arguments = next(e for e in events if e["type"] == "response.mcp_call_arguments.done")
    assert arguments["arguments"] == '{"city": "Rome"}'
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert [item["type"] for item in final["output"]] == ["message", "mcp_call", "mcp_call",
                                                          "message"]
    assert final["output"][1]["output"] == "Rome: 27°C and thick fog"


def test_an_mcp_call_sent_back_is_the_call_and_its_result_whatever_its_error_shape():
    from app.server.responses.inbound import responses_messages
    from app.server.responses.schemas import ResponseCreateRequest

    body = ResponseCreateRequest.model_validate({"model": MODEL, "input": [
        {"type": "mcp_call", "id": "mcp_1", "server_label": "w", "name": "add",
         "arguments": "[1, 2]", "output": None, "error": "add failed (older clients: text)"},
        {"type": "mcp_call", "id": "mcp_2", "name": "get_weather", "arguments": "{}",
         "error": {"type": "mcp_protocol_error", "code": -32602, "message": "no city"}}]})
    messages = responses_messages(body.input)
    assert [(m.role, m.content, [(c.id, c.arguments) for c in m.tool_calls])
            for m in messages] == [
        ("assistant", "", [("mcp_1", "{}")]), ("tool", "add failed (older clients: text)", []),
        ("assistant", "", [("mcp_2", "{}")]), ("tool", "no city", [])]
