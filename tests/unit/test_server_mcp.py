"""`ember serve --mcp` apart from any MCP server or model: how a request asks for servers, the
400 of a server started without --mcp, which tools may run, and the pieces of the loop's
rounds (what the client sees of a round, the next round's request, the final usage)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.mcp.approvals import Approvals
from app.mcp.config import McpConfigError, McpServerConfig
from app.mcp.connections import McpTool
from app.mcp.tool_loop import DEFAULT_SYSTEM, STEP_LIMIT, TOOLS_NOTE, ToolIndex, next_step
from app.server.mcp_rounds import RoundFilter, after_calls, combined, split_calls, with_mcp_tools
from app.server.server_tools import McpAsk, ServerTools, parse_ask
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
