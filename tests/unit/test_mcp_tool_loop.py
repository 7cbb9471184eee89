"""The tool loop's rules apart from any server: names the model sees, arguments, approvals,
and the conversation's servers in the history."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.history import History
from app.mcp.approvals import Approvals
from app.mcp.config import McpConfigError, McpServerConfig
from app.mcp.connections import McpTool, result_text
from app.mcp.tool_loop import ToolIndex, call_arguments
from backends.base import ToolCall
from backends.errors import InvalidRequestError

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_tools_keep_their_names_and_a_clash_between_servers_is_prefixed():
    index = ToolIndex.of([McpTool("weather", "forecast", "Forecast", CITY),
                          McpTool("a", "search", "", {}), McpTool("b", "search", "", {}),
                          McpTool("b", "read file", "", {"type": "object"})])
    assert list(index.by_name) == ["forecast", "a_search", "b_search", "read_file"]
    tools = index.request_tools()
    assert tools[0].name == "forecast" and tools[0].parameters == CITY
    assert tools[1].parameters == {"type": "object", "properties": {}}
    assert index.by_name["b_search"].server == "b" and index.problems == {}


def test_a_tool_with_a_schema_the_model_cannot_take_is_left_out_with_the_reason():
    index = ToolIndex.of([McpTool("s", "ok", "", CITY),
                          McpTool("s", "bad", "", {"type": "object", "properties": 3})])
    assert list(index.by_name) == ["ok"]
    assert "is not a valid JSON schema" in index.problems["s/bad"]


def test_call_arguments_must_be_a_json_object():
    assert call_arguments(ToolCall("c1", "f", '{"city": "Oslo"}')) == {"city": "Oslo"}
    assert call_arguments(ToolCall("c1", "f", "")) == {}
    with pytest.raises(InvalidRequestError, match="arguments of f are not valid JSON"):
        call_arguments(ToolCall("c1", "f", '{"city": '))
    with pytest.raises(InvalidRequestError, match="must be a JSON object"):
        call_arguments(ToolCall("c1", "f", "[1]"))


def test_result_text_joins_text_blocks_and_names_what_a_text_model_cannot_see():
    from mcp.types import CallToolResult, ImageContent, TextContent

    result = CallToolResult(content=[TextContent(text="one"), TextContent(text="two"),
                                     ImageContent(data="AA==", mime_type="image/png")])
    assert result_text(result) == "one\ntwo\n[image content, not shown to the model]"
    assert result_text(CallToolResult(content=[], structured_content={"t": 3})) == '{"t": 3}'


WEATHER = McpServerConfig("weather", command="weather-server", args=("--units", "C"),
                          env={"WEATHER_TOKEN": "t1"})


def test_allow_always_is_remembered_per_server_and_tool(tmp_path: Path):
    approvals = Approvals(tmp_path / "mcp-approvals.json")
    assert not approvals.allowed(WEATHER, "forecast")
    approvals.allow_always(WEATHER, "forecast")
    again = Approvals(tmp_path / "mcp-approvals.json")  # as after a restart
    assert again.allowed(WEATHER, "forecast")
    assert not again.allowed(WEATHER, "alerts")
    assert not again.allowed(replace(WEATHER, name="other"), "forecast")
    assert again.all() == ["weather/forecast"]
    again.forget("weather", "forecast")
    assert again.all() == []


def test_allow_always_is_void_once_the_servers_definition_changes(tmp_path: Path):
    approvals = Approvals(tmp_path / "mcp-approvals.json")
    approvals.allow_always(WEATHER, "forecast")
    # a rotated token is the same server; another program, argument, folder or env name is not
    assert approvals.allowed(replace(WEATHER, env={"WEATHER_TOKEN": "t2"}), "forecast")
    for changed in [replace(WEATHER, command="/tmp/evil"), replace(WEATHER, args=()),
                    replace(WEATHER, cwd="/tmp"), replace(WEATHER, env={"LD_PRELOAD": "x"})]:
        assert not approvals.allowed(changed, "forecast"), changed
    web = McpServerConfig("weather", url="https://weather.example/mcp")
    approvals.allow_always(web, "forecast")
    assert approvals.allowed(web, "forecast")
    assert not approvals.allowed(replace(web, url="https://evil.example/mcp"), "forecast")
    # an approval an older Ember wrote (no definition) allows nothing
    (tmp_path / "old.json").write_text('{"allowed": ["weather/forecast"]}')
    assert not Approvals(tmp_path / "old.json").allowed(WEATHER, "forecast")


def test_an_unreadable_approvals_file_allows_nothing_and_is_not_overwritten(tmp_path: Path):
    path = tmp_path / "mcp-approvals.json"
    path.write_text("{not json")
    approvals = Approvals(path)
    assert not approvals.allowed(WEATHER, "forecast")
    with pytest.raises(McpConfigError, match="could not be read"):
        approvals.allow_always(WEATHER, "forecast")
    assert path.read_text() == "{not json"


def test_the_servers_switched_on_are_the_conversations(tmp_path: Path):
    history = History(tmp_path / "history.db")
    a, b = history.create(), history.create()
    history.set_mcp_servers(a.id, ("weather", "files", "weather"))
    assert history.mcp_servers(a.id) == ("files", "weather") and history.mcp_servers(b.id) == ()
    history.close()
    history = History(tmp_path / "history.db")  # kept in the file
    assert history.mcp_servers(a.id) == ("files", "weather")
    history.set_mcp_servers(a.id, ())
    assert history.mcp_servers(a.id) == ()
    from app.history import HistoryError
    with pytest.raises(HistoryError, match="no conversation 99"):
        history.set_mcp_servers(99, ("weather",))


def test_a_repeated_call_is_the_same_call_whatever_its_spacing():
    from app.mcp.tool_loop import call_key

    first = ToolCall("call_1", "get_weather", '{\n    "city": "Paris", "unit": "C"\n  }')
    again = ToolCall("call_2", "get_weather", '{"unit": "C", "city": "Paris"}')
    assert call_key(first) == call_key(again)
    assert call_key(first) != call_key(ToolCall("call_3", "get_weather", '{"city": "Oslo"}'))
    assert call_key(ToolCall("c", "f", "{bad")) == ("f", "{bad")


def test_a_result_is_capped_at_the_servers_limit_with_a_note():
    import json

    from app.mcp.config import parse_mcp_config
    from app.mcp.connections import capped

    assert capped("é" * 10, 1024) == "é" * 10
    cut = capped("é" * 2000, 1025)  # never half a character
    assert cut.startswith("é" * 512) and "4,000 bytes; the first 1,025 are shown" in cut
    entry = {"command": "x", "maxResultBytes": 1 << 20}
    assert parse_mcp_config(json.dumps({"mcpServers": {"a": entry}}))["a"].max_result_bytes \
        == 1 << 20
    with pytest.raises(McpConfigError, match="maxResultBytes must be a whole number"):
        parse_mcp_config(json.dumps({"mcpServers": {"a": {"command": "x",
                                                          "maxResultBytes": "big"}}}))
