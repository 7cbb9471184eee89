"""Real MCP servers (tests/support/mcp_server.py, on the official SDK) through Ember's
connections: stdio and streamable HTTP, listing and calling tools, and every way a server can
fail (no start, a start that fails, output that is not MCP, a hang, a crash), each one line
that names the server and says what happened, with the connections usable afterwards."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from app.mcp.config import McpServerConfig, parse_mcp_config
from app.mcp.connections import McpConnections, McpServerError
from tests.support.live_server import free_port
from tests.support.mcp_server import FAILED_START, command, http_server


def stdio(name: str, *flags: str, timeout: float = 30.0) -> McpServerConfig:
    import json

    entry = dict(command(*flags), timeout=timeout)
    return parse_mcp_config(json.dumps({"mcpServers": {name: entry}}))[name]


@pytest.fixture
def connections() -> Iterator[McpConnections]:
    c = McpConnections(startup_timeout_s=15)
    yield c
    c.close()


def test_a_stdio_server_lists_its_two_tools_and_runs_them(connections: McpConnections):
    weather = stdio("weather")
    tools, failed = connections.tools([weather])
    assert failed == {}
    assert [(t.server, t.name) for t in tools] == [("weather", "get_weather"), ("weather", "add")]
    assert tools[0].description == "Get the current weather in a city."
    assert tools[0].parameters["required"] == ["city"]
    result = connections.call(weather, "get_weather", {"city": "Oslo"})
    assert result.text == "Oslo: 27°C and thick fog"
    assert not result.is_error and 0 < result.seconds < 5
    assert connections.call(weather, "add", {"a": 2, "b": 40}).text == "42"


def test_a_call_the_tool_rejects_is_an_error_result_for_the_model(connections):
    result = connections.call(stdio("weather"), "add", {"a": "two"})
    assert result.is_error and "validation error" in result.text


def mcp_server_children() -> list[int]:
    """The MCP test servers among this process's descendants. Others may be there and end at
    any moment (the packaging tests' build runs in the background): one that is gone or a
    zombie when asked for its command line is not one of ours."""
    import psutil

    pids = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "tests.support.mcp_server" in " ".join(p.cmdline()):
                pids.append(p.pid)
        except psutil.Error:
            continue
    return pids


def test_the_server_process_is_kept_between_calls_and_stopped_at_close():
    import psutil

    c = McpConnections(startup_timeout_s=15)
    c.tools([stdio("weather")])
    children = mcp_server_children()
    assert len(children) == 1
    c.call(stdio("weather"), "add", {"a": 1, "b": 1})
    assert mcp_server_children() == children
    c.close()
    with contextlib.suppress(psutil.NoSuchProcess):  # else already stopped and reaped
        psutil.Process(children[0]).wait(10)
    assert mcp_server_children() == []


def test_a_streamable_http_server_lists_and_runs_its_tools(connections: McpConnections):
    with http_server(free_port()) as url:
        server = McpServerConfig("remote", url=url, headers={"X-Ember-Test": "1"})
        tools, failed = connections.tools([server])
        assert failed == {} and sorted(t.name for t in tools) == ["add", "get_weather"]
        assert connections.call(server, "add", {"a": 20, "b": 22}).text == "42"


def test_an_http_server_that_is_not_there_is_one_line(connections: McpConnections):
    port = free_port()
    tools, failed = connections.tools([McpServerConfig("away", url=f"http://127.0.0.1:{port}/mcp")])
    assert tools == [] and failed["away"].startswith("MCP server away could not be reached (")


def test_servers_that_fail_to_start_each_say_why_and_the_others_work(connections):
    tools, failed = connections.tools([
        McpServerConfig("missing", command="/no/such/mcp-server"),
        stdio("broken", "--fail-at-start"),
        stdio("weather")])
    assert [t.name for t in tools] == ["get_weather", "add"]
    assert failed["missing"] == ("MCP server missing could not be started ([Errno 2] No such "
                                 "file or directory: '/no/such/mcp-server')")
    assert failed["broken"].startswith("MCP server broken stopped before it was ready")
    assert failed["broken"].endswith(": " + FAILED_START)  # the last line of its stderr
    assert "\n" not in failed["broken"]


def test_a_program_that_does_not_speak_mcp_is_named_with_what_it_wrote():
    c = McpConnections(startup_timeout_s=3)
    try:
        started = time.monotonic()
        tools, failed = c.tools([stdio("chatty", "--garbage")])
        assert tools == [] and time.monotonic() - started < 10
        assert failed["chatty"] == ("MCP server chatty wrote something that is not MCP: "
                                    "'hello from a program that is not an MCP server'; check "
                                    "its command in mcp.json")
    finally:
        c.close()


def test_a_call_that_hangs_times_out_and_the_server_still_answers_later(connections):
    slow = stdio("slow", "--slow", "3", timeout=1)
    started = time.monotonic()
    with pytest.raises(McpServerError) as e:
        connections.call(slow, "add", {"a": 1, "b": 2})
    assert str(e.value) == "MCP server slow did not answer within 1 s"
    assert time.monotonic() - started < 6
    patient = stdio("slow", "--slow", "3", timeout=10)  # a new entry: a new connection
    assert connections.call(patient, "add", {"a": 1, "b": 2}).text == "3"


def test_a_server_that_crashes_during_a_call_says_so_and_is_started_again(connections):
    dying = stdio("dying", "--die-on-call")
    with pytest.raises(McpServerError) as e:
        connections.call(dying, "get_weather", {"city": "Oslo"})
    assert str(e.value) == "MCP server dying stopped during the call: the weather station crashed"
    tools, failed = connections.tools([dying])  # started again for the next use
    assert failed == {} and len(tools) == 2


def test_a_stdio_server_gets_a_scrubbed_environment_and_its_own_env(connections, monkeypatch):
    """Ember's keys never reach a server (the SDK's allow-list: HOME, PATH, USER...), only
    what mcp.json gives it."""
    import json

    for key in ("EMBER_API_KEY", "HF_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(key, "secret-" + key)
    entry = dict(command("--probes"), env={"WEATHER_TOKEN": "given"})
    config = parse_mcp_config(json.dumps({"mcpServers": {"probe": entry}}))["probe"]
    env = json.loads(connections.call(config, "environment", {}).text)
    assert not [k for k in env if "secret-" in env[k]]
    assert env["WEATHER_TOKEN"] == "given" and "PATH" in env


def test_a_5_mb_result_reaches_the_model_cut_with_a_note(connections):
    config = stdio("probe", "--probes")
    result = connections.call(config, "flood", {"size": 5 << 20})
    assert len(result.text.encode()) < (64 << 10) + 200
    assert result.text.endswith("[result cut: the tool returned 5,242,880 bytes; the first "
                                "65,536 are shown]")
    small = connections.call(config, "flood", {"size": 100})
    assert small.text == ("0123456789abcdef" * 7)[:100]
