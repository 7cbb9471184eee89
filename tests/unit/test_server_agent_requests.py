"""What coding agents send is taken (issue 38): the first request of the real Claude Code
and Codex CLIs (their shapes, captured: tests/data/agents), `max_tokens` far above the
context on every dialect (a ceiling, not a demand), Codex's `namespace` tools offered as
their functions and their calls answered with the namespace, hosted tools left out and
named, and a system turn inside an Anthropic conversation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.server.generation_request import LEFT_OUT_HEADER
from backends.base import TokenEvent, ToolCallEvent
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served

AGENTS = Path(__file__).parent.parent / "data" / "agents"
USER = {"role": "user", "content": "Reply pong"}


def captured(name: str) -> tuple[str, dict, dict]:
    shape = json.loads((AGENTS / name).read_text(encoding="utf-8"))
    return shape["path"], shape["headers"], {**shape["body"], "model": MODEL}


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.mark.parametrize("name", ["claude-code-2.1.328-messages.json",
                                  "codex-0.169.0-responses.json"])
def test_an_agents_first_request_is_answered(name):
    path, headers, body = captured(name)
    fake = ScriptedRuntime(script=[TokenEvent("pong")])
    with served(fake) as client:
        r = client.post(path, json=body, headers=headers)
        assert r.status_code == 200, r.text
        assert "pong" in r.text
    request = fake.requests[0]
    # Claude Code asks for 32000 tokens of any model: the ceiling goes to the backend, which
    # stops at the context's end
    assert request.sampling.max_tokens == (32000 if "claude" in name else None)
    assert len(request.tools) >= 10
    # the session's key steers the prefix cache (backends.llamacpp.engine.others_first)
    key = body["metadata"]["user_id"] if "claude" in name else body["prompt_cache_key"]
    assert request.cache_key == key and key


def test_chat_completions_prompt_cache_key_steers_the_cache_too():
    fake = ScriptedRuntime(script=[TokenEvent("pong")])
    with served(fake) as client:
        r = client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}],
            "prompt_cache_key": "session-1"})
        assert r.status_code == 200, r.text
    assert fake.requests[0].cache_key == "session-1"


def test_claude_codes_system_turn_after_the_users_reaches_the_model():
    path, headers, body = captured("claude-code-2.1.328-messages.json")
    fake = ScriptedRuntime(script=[TokenEvent("pong")])
    with served(fake) as client:
        assert client.post(path, json={**body, "stream": False}, headers=headers).is_success
    roles = [m.role for m in fake.requests[0].messages]
    assert roles == ["system", "user", "system"]
    assert fake.requests[0].messages[2].content.startswith("# Environment")


CEILINGS = [
    ("/v1/chat/completions", {"messages": [USER], "max_tokens": 10**6}),
    ("/v1/chat/completions", {"messages": [USER], "max_completion_tokens": 32000}),
    ("/v1/completions", {"prompt": "Once", "max_tokens": 10**6}),
    ("/v1/responses", {"input": "Reply pong", "max_output_tokens": 10**6}),
    ("/v1/messages", {"messages": [USER], "max_tokens": 32000}),
    ("/api/chat", {"messages": [USER], "options": {"num_predict": 10**6}}),
    ("/api/generate", {"prompt": "Once", "options": {"num_predict": 10**6}}),
]


@pytest.mark.parametrize(("path", "body"), CEILINGS)
def test_max_tokens_far_above_the_context_is_a_ceiling_on_every_dialect(path, body):
    fake = ScriptedRuntime(script=[TokenEvent("ok")], context=4096)
    with served(fake) as client:
        r = client.post(path, json={"model": MODEL, "stream": False, **body})
        assert r.status_code == 200, r.text
    assert fake.requests[0].sampling.max_tokens > fake.context


CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "description": "Run a command",
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
    {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents", "tools": [
        {"type": "function", "name": "close_agent", "description": "Close an agent",
         "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}},
        {"type": "function", "name": "exec_command", "description": "Run in an agent",
         "parameters": {"type": "object", "properties": {}}}]},
    {"type": "web_search", "external_web_access": False},
]


def test_namespace_tools_are_offered_as_their_functions_and_calls_name_the_namespace():
    fake = ScriptedRuntime(script=[ToolCallEvent(0, '{"target": "a1"}', "call_1", "close_agent")])
    with served(fake) as client:
        r = client.post("/v1/responses", json={"model": MODEL, "input": "Close a1",
                                               "tools": CODEX_TOOLS})
        assert r.status_code == 200, r.text
        assert r.headers[LEFT_OUT_HEADER] == "web_search"
        call = r.json()["output"][0]
        assert (call["type"], call["namespace"], call["name"], call["arguments"]) == (
            "function_call", "multi_agent_v1", "close_agent", '{"target": "a1"}')
        # a name two tools share: the namespaced one is shown as NAMESPACE__NAME
        assert [t.name for t in fake.requests[0].tools] == [
            "exec_command", "close_agent", "multi_agent_v1__exec_command"]
        # the call sent back with its result: the model sees it by the name it called
        r = client.post("/v1/responses", json={"model": MODEL, "tools": CODEX_TOOLS, "input": [
            {"role": "user", "content": "Close a1"},
            {**{k: call[k] for k in ("type", "call_id", "name", "arguments", "namespace")}},
            {"type": "function_call_output", "call_id": call["call_id"], "output": "closed"}]})
        assert r.status_code == 200, r.text
        assert fake.requests[1].messages[1].tool_calls[0].name == "close_agent"


def test_a_streamed_namespaced_call_names_its_namespace_in_every_item_event():
    fake = ScriptedRuntime(script=[
        ToolCallEvent(0, "", "call_1", "multi_agent_v1__exec_command"), ToolCallEvent(0, "{}")])
    with served(fake) as client:
        r = client.post("/v1/responses", json={"model": MODEL, "input": "x", "stream": True,
                                               "tools": CODEX_TOOLS})
        assert r.status_code == 200 and r.headers[LEFT_OUT_HEADER] == "web_search"
    items = [e["item"] for e in sse_events(r.text) if e["type"].startswith("response.output_item")]
    assert [(i["namespace"], i["name"]) for i in items] == [
        ("multi_agent_v1", "exec_command")] * 2
    done = [e for e in sse_events(r.text) if e["type"] == "response.completed"][0]
    assert done["response"]["output"][0]["namespace"] == "multi_agent_v1"


def test_a_bad_schema_inside_a_namespace_is_named_by_its_wire_path():
    bad = [{"type": "namespace", "name": "ns", "tools": [
        {"type": "function", "name": "ok"},
        {"type": "function", "name": "broken", "parameters": {"type": "string"}}]}]
    with served(ScriptedRuntime(script=[TokenEvent("ok")])) as client:
        r = client.post("/v1/responses", json={"model": MODEL, "input": "x", "tools": bad})
    assert r.status_code == 400
    assert r.json()["error"]["param"].startswith("tools[0].tools[1].parameters"), r.json()


def test_forcing_a_hosted_tool_is_refused_and_offering_only_hosted_tools_is_not():
    with served(ScriptedRuntime(script=[TokenEvent("ok")])) as client:
        r = client.post("/v1/responses", json={"model": MODEL, "input": "x",
                                               "tools": [{"type": "web_search"}],
                                               "tool_choice": {"type": "web_search"}})
        assert r.status_code == 400 and "forces the tool type 'web_search'" in r.text
        r = client.post("/v1/responses", json={
            "model": MODEL, "input": "x", "tools": [{"type": "file_search"},
                                                    {"type": "custom", "name": "apply_patch"}],
            "store": False, "prompt_cache_key": "k", "client_metadata": {"a": "b"},
            "include": ["reasoning.encrypted_content"]})
        assert r.status_code == 200, r.text
        assert r.headers[LEFT_OUT_HEADER] == "file_search, custom:apply_patch"


def test_metrics_count_the_requests_and_tokens_of_every_dialect():
    fake = ScriptedRuntime(script=[TokenEvent("ok")], cached_tokens=3)
    with served(fake) as client:
        for path, body in CEILINGS:
            assert client.post(path, json={"model": MODEL, "stream": False, **body}).is_success
        metrics = client.get("/metrics").text
    labels = {line.split('endpoint="')[1].split('"')[0] for line in metrics.splitlines()
              if line.startswith("ember_requests_total{")}
    assert labels == {"chat", "completions", "responses", "messages", "api_chat",
                      "api_generate"}
    assert f"ember_prompt_tokens_total {fake.prompt_tokens * len(CEILINGS)}" in metrics
    assert f"ember_cached_prompt_tokens_total {3 * len(CEILINGS)}" in metrics


def test_anthropic_server_tools_are_left_out_and_named():
    fake = ScriptedRuntime(script=[TokenEvent("ok")])
    tools = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}},
              "cache_control": {"type": "ephemeral"}},
             {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
    with served(fake) as client:
        for stream in (False, True):
            r = client.post("/v1/messages", json={"model": MODEL, "max_tokens": 32000,
                                                  "stream": stream, "tools": tools,
                                                  "messages": [USER]})
            assert r.status_code == 200, r.text
            assert r.headers[LEFT_OUT_HEADER] == "web_search_20250305:web_search"
    assert [t.name for t in fake.requests[0].tools] == ["get_weather"]
