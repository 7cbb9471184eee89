"""The tool loop, apart from any widget or route: which tools the model is offered under which
names, what a call's arguments are, what the model is told when a call is denied or fails,
and when the loop must stop (`next_step`). The chat session (app.chat, for the window and
`ember chat`) and `ember serve --mcp` (app.server.server_tools) both run it.

The chat's loop (app.chat.tools.run_round) is: the model answers with calls; each call waits for the
user's decision (or an "Allow always"), runs on its server, and its result goes back as a
`tool` message; the model is asked again, until it answers in words or STEP_LIMIT rounds of
calls have run. A model that only repeats calls whose results it already has (small models
do: Qwen2.5-Coder-1.5B with two tools offered) is asked once more with tool_choice "none",
so it answers from them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from app.mcp.connections import McpTool
from backends.base import TOOL_NAME, Tool, ToolCall, ToolChoice, check_tools
from backends.errors import InvalidRequestError

STEP_LIMIT = 8  # rounds of tool calls in one answer: a model that loops is stopped
# Small models (Qwen2.5-Coder) call the same tool again after its result unless told to
# answer from it (tests/integration/test_server_tools.py); a chat with tools says so, after
# its own system prompt or this one. The 1.5B follows these words, not looser ones.
DEFAULT_SYSTEM = "You are a helpful assistant."
TOOLS_NOTE = ("When a tool result is given, do not call the tool again: answer the user in "
              "plain words from it.")


def denied_text(tool: str) -> str:
    return (f"The user denied this call of {tool}: it was not run. Do not call it again; "
            "answer without it, and say what you could not do.")


def failed_text(why: str) -> str:
    return f"The tool could not be run: {why}"


def refused_text(server: str, tool: str) -> str:
    """What the model is told of a call `ember serve --mcp` would not run: no one is there to
    allow it."""
    return (f"This call of {tool} was not run: the Ember server runs only the MCP tools the "
            f"user allowed for API clients (Allow always in Ember's window, or `ember serve "
            f"--mcp-allow {server}/{tool}`). Do not call it again; answer without it, and say "
            "what you could not do.")


def step_limit_note(limit: int = STEP_LIMIT) -> str:
    return (f"Stopped after {limit} rounds of tool calls: the model kept calling tools "
            "without answering. Ask again more precisely, or switch tools off for this chat.")


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] or "tool"


@dataclass(frozen=True)
class ToolIndex:
    """The enabled servers' tools under the names the model sees: a tool's own name, or
    `server_name` when two servers offer the same one (names the wire accepts only)."""
    by_name: dict[str, McpTool]
    problems: dict[str, str]  # a tool left out, and why (a server's schema Ember can't use)

    @classmethod
    def of(cls, tools: list[McpTool]) -> ToolIndex:
        counts: dict[str, int] = {}
        for t in tools:
            counts[_clean(t.name)] = counts.get(_clean(t.name), 0) + 1
        by_name: dict[str, McpTool] = {}
        problems: dict[str, str] = {}
        for t in tools:
            name = _clean(t.name)
            if counts[name] > 1 or name in by_name:
                name = _clean(f"{t.server}_{t.name}")
            if name in by_name or not TOOL_NAME.match(name):
                problems[f"{t.server}/{t.name}"] = "its name clashes with another tool"
                continue
            try:
                check_tools((as_tool(name, t),), ToolChoice())
            except InvalidRequestError as e:
                problems[f"{t.server}/{t.name}"] = str(e)
                continue
            by_name[name] = t
        return cls(by_name, problems)

    def request_tools(self) -> tuple[Tool, ...]:
        return tuple(as_tool(name, t) for name, t in self.by_name.items())


def as_tool(name: str, tool: McpTool) -> Tool:
    parameters = dict(tool.parameters) or {"type": "object", "properties": {}}
    parameters.setdefault("type", "object")
    return Tool(name, tool.description, parameters)


def call_key(call: ToolCall) -> tuple[str, str]:
    """What makes two calls the same: the tool and its arguments, however they are spaced."""
    try:
        return call.name, json.dumps(json.loads(call.arguments or "{}"), sort_keys=True)
    except ValueError:
        return call.name, call.arguments


Step = Literal["answer", "ask_for_words", "step_limit", "run"]


def next_step(calls: Iterable[ToolCall], made: set[tuple[str, str]], asked_for_words: bool,
              steps: int, limit: int = STEP_LIMIT) -> Step:
    """What the loop does with an answer's calls of MCP tools, after `steps` rounds that ran
    the calls `made` (call_key): none, the answer is final ("answer"); only calls whose results
    the model already has, ask once more with tool_choice "none" ("ask_for_words"; once: a
    model that calls even then goes on to the limit); `limit` rounds done, stop with
    step_limit_note ("step_limit"); else run them ("run")."""
    calls = list(calls)
    if not calls:
        return "answer"
    if not asked_for_words and all(call_key(c) in made for c in calls):
        return "ask_for_words"
    if steps >= limit:
        return "step_limit"
    return "run"


def call_arguments(call: ToolCall) -> dict:
    """A call's arguments as an object; InvalidRequestError when the model wrote something
    else (the model is told, and may try again)."""
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError as e:
        raise InvalidRequestError(f"the arguments of {call.name} are not valid JSON ({e})"
                                  ) from e
    if not isinstance(args, dict):
        raise InvalidRequestError(f"the arguments of {call.name} must be a JSON object")
    return args
