"""`ember serve --mcp` with the real MCP test server (tests/support/mcp_server.py, stdio, each
call it runs written to a file): the loop's rounds through the real app and routes, with the
model's events scripted per round (tests/support/fake_runtime), then one real round trip with
the 0.5B. An allowed call runs and its result reaches the model; a call the user did not allow
is refused and never reaches the server; a server that crashes or cannot start is a tool error
or a 502, never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.mcp.tool_loop import STEP_LIMIT
from backends.base import OutputEvent, TokenEvent
from tests.support.fake_runtime import MODEL, served
from tests.support.mcp_server import FAILED_START, command
from tests.support.scripted_rounds import Rounds, call

USER = {"role": "user", "content": "Weather in Paris?"}
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}


@dataclass
class Setup:
    client: object
    model: Rounds
    calls_file: Path

    def calls(self) -> list[str]:
        """The calls the MCP server really ran."""
        return self.calls_file.read_text().splitlines() if self.calls_file.exists() else []

    def play(self, *rounds: list[OutputEvent], too_long_after: int | None = None) -> None:
        self.model.play(*rounds, too_long_after=too_long_after)
        self.calls_file.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    home = tmp_path_factory.mktemp("mcp-home")
    calls = home / "calls.txt"
    (home / "mcp.json").write_text(json.dumps({"mcpServers": {
        "weather": {**command("--calls", str(calls), "--probes"), "maxResultBytes": 1024},
        "crashy": command("--die-on-call"),
        "broken": command("--fail-at-start"),
        "off": {**command(), "disabled": True}}}))
    model = Rounds()
    with served(model, mcp=True, mcp_home=home,
                mcp_allow=("weather/get_weather", "weather/flood", "crashy/*")) as client:
        yield Setup(client, model, calls)


def test_an_allowed_call_runs_another_is_refused_and_the_answer_comes_back(setup: Setup):
    setup.play([call(0, "get_weather", {"city": "Paris"}), call(1, "add", {"a": 1, "b": 2})],
               [TokenEvent("Paris: 27°C and thick fog.")])
    r = setup.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [USER], "mcp": ["weather"], "tool_choice": "required"})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == "Paris: 27°C and thick fog."
    assert choice["message"].get("tool_calls") is None and choice["finish_reason"] == "stop"
    assert r.json()["usage"]["prompt_tokens"] == 2 * 7  # both rounds read their prompt
    first, second = setup.model.requests
    assert [t.name for t in first.tools] == ["get_weather", "add", "environment", "flood"]
    assert first.tool_choice.mode == "required" and second.tool_choice.mode == "auto"
    weather, added = second.messages[-2:]
    assert weather.content == "Paris: 27°C and thick fog" and weather.tool_call_id == "call_0"
    assert "add was not run" in added.content and "--mcp-allow weather/add" in added.content
    assert setup.calls() == ['get_weather {"city": "Paris"}']  # add never reached the server


def test_a_round_that_calls_the_clients_tool_comes_back_with_that_call_only(setup: Setup):
    setup.play([call(0, "get_weather", {"city": "Oslo"}), call(1, "lookup", {"q": "x"})])
    r = setup.client.post("/v1/messages", json={
        "model": MODEL, "max_tokens": 50, "messages": [USER],
        "integrations": ["mcp/weather"], "tools": [{
            "name": "lookup", "input_schema": LOOKUP["function"]["parameters"]}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stop_reason"] == "tool_use"
    assert [(b["type"], b.get("name")) for b in body["content"]] == [("tool_use", "lookup")]
    assert setup.calls() == []  # the MCP call of that round was not run


def test_a_responses_request_gets_the_calls_then_the_final_answer_as_its_output(
        setup: Setup):
    setup.play([call(0, "get_weather", {"city": "Rome"})], [TokenEvent("Rome is foggy.")])
    r = setup.client.post("/v1/responses", json={
        "model": MODEL, "input": "Weather in Rome?", "mcp": ["weather"]})
    assert r.status_code == 200, r.text
    output = r.json()["output"]
    assert [item["type"] for item in output] == ["mcp_call", "message"]
    assert {k: output[0][k] for k in ("server_label", "name", "arguments", "output", "error")
            } == {"server_label": "weather", "name": "get_weather",
                  "arguments": '{"city": "Rome"}', "output": "Rome: 27°C and thick fog",
                  "error": None}
    assert output[1]["content"][0]["text"] == "Rome is foggy."
    assert setup.calls() == ['get_weather {"city": "Rome"}']


def test_a_prompt_grown_past_the_context_by_a_result_is_a_400_not_a_500(setup: Setup):
    setup.play([call(0, "flood", {"size": 500})], too_long_after=1)
    r = setup.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [USER], "mcp": ["weather"]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("after MCP tool calls: the prompt is 9000 tokens, "
                                            "more than fits")


def test_a_stream_shows_each_rounds_text_and_stops_at_the_step_limit(setup: Setup):
    cities = [f"City{i}" for i in range(STEP_LIMIT + 1)]
    setup.play(*[[TokenEvent("Checking."), call(0, "get_weather", {"city": c})]
                 for c in cities])
    with setup.client.stream("POST", "/v1/chat/completions", json={
            "model": MODEL, "messages": [USER], "mcp": ["weather"], "stream": True}) as r:
        assert r.status_code == 200
        chunks = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    text = "".join(d.get("content") or "" for d in deltas)
    assert not any("tool_calls" in d for d in deltas)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert text.startswith("Checking.\n\nChecking.") and text.count("Checking.") == 9
    assert text.endswith(f"stopped after {STEP_LIMIT} rounds of MCP tool calls: the model "
                         "kept calling tools without answering.]")
    assert len(setup.calls()) == STEP_LIMIT


def test_a_crash_is_a_tool_error_a_flood_is_cut_and_a_failed_start_a_502(setup: Setup):
    setup.play([call(0, "add", {"a": 1, "b": 2})], [TokenEvent("The tool failed.")])
    r = setup.client.post("/api/chat", json={"model": MODEL, "messages": [USER],
                                             "stream": False, "mcp": ["crashy"]})
    assert r.status_code == 200 and r.json()["message"]["content"] == "The tool failed."
    result = setup.model.requests[1].messages[-1].content
    assert result.startswith("The tool could not be run: MCP server crashy stopped")
    setup.play([call(0, "flood", {"size": 100_000})], [TokenEvent("Long.")])
    r = setup.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [USER], "mcp": ["weather"]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Long."
    result = setup.model.requests[1].messages[-1].content
    assert result.startswith("0123456789abcdef") and len(result.encode()) < 1200
    assert result.endswith("[result cut: the tool returned 100,000 bytes; the first 1,024 are "
                           "shown]")
    r = setup.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [USER], "mcp": ["weather", "broken"]})
    assert r.status_code == 502 and FAILED_START in r.json()["error"]["message"]
    r = setup.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [USER], "mcp": ["off"]})
    assert r.status_code == 400 and "'off' is disabled" in r.json()["error"]["message"]


def test_the_05b_through_a_real_server_answers_from_an_mcp_tools_result(store, qwen, tmp_path):
    import openai

    from app.mcp.approvals import Approvals
    from app.mcp.config import load_mcp_config
    from tests.support.live_server import live_server

    calls = tmp_path / "calls.txt"
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {
        "weather": command("--calls", str(calls))}}))
    # the user's "Allow always" from the window, for this server as mcp.json defines it
    Approvals(tmp_path / "mcp-approvals.json").allow_always(
        load_mcp_config(tmp_path / "mcp.json")["weather"], "get_weather")
    with live_server(store, mcp=True, mcp_home=tmp_path) as (url, _):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        answer = client.chat.completions.create(
            model=qwen.ref, messages=[{"role": "user", "content": "What's the weather in Paris?"}],
            tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=40,
            extra_body={"integrations": [{"type": "plugin", "id": "mcp/weather",
                                          "allowed_tools": ["get_weather"]}]})
    message = answer.choices[0].message
    assert calls.read_text().splitlines() == ['get_weather {"city": "Paris"}']
    assert not message.tool_calls and answer.choices[0].finish_reason == "stop"
    assert "27" in message.content or "fog" in message.content.lower(), message.content
    assert answer.usage.prompt_tokens > 2 * 100  # two rounds at least, tools in each prompt


def test_requests_that_start_a_server_at_once_share_one_start():
    """The window starts a server from one task at a time; API requests come together."""
    from concurrent.futures import ThreadPoolExecutor

    from app.mcp.config import parse_mcp_config
    from app.mcp.connections import McpConnections

    weather = parse_mcp_config(json.dumps({"mcpServers": {"weather": command()}}))["weather"]
    connections = McpConnections(startup_timeout_s=15)
    try:
        with ThreadPoolExecutor(3) as pool:
            listed = list(pool.map(lambda _: connections.tools([weather]), range(3)))
        assert all(failed == {} and [t.name for t in tools] == ["get_weather", "add"]
                   for tools, failed in listed), listed
        assert connections.call(weather, "add", {"a": 2, "b": 3}).text == "5"
    finally:
        connections.close()
