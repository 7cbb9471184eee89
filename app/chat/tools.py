"""The chat's MCP tools: the servers of mcp.json, their open connections and the "Allow
always" choices (ChatTools), and one round of the tool loop (run_round): the calls of one
answer, in order, each stored as a `tool` message before anything runs, waiting for the front
end's decision (its approval callback) unless its tool is allowed always, run on its server,
and its result stored as the text the model is given back.

Which tools are offered, what a call's arguments are and when the loop stops are
app.mcp.tool_loop's; this module runs them for a chat.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from app.chat.events import ChatEvent, Decision, ToolCallAsked, ToolCallStarted, ToolResult
from app.config import Paths
from app.history import History
from app.mcp.approvals import Approvals
from app.mcp.config import McpConfigError, McpServerConfig, load_mcp_config
from app.mcp.connections import McpConnections, McpResult, McpServerError
from app.mcp.tool_loop import ToolIndex, call_arguments, denied_text, failed_text
from backends.base import ToolCall
from backends.errors import InvalidRequestError

NOT_RUN = "The call was not run: Ember stopped before it finished."
STOPPED = "The call was not run: the user stopped the answer."
# a call cannot be taken back from a server once sent: it may finish there, unseen
STOPPED_RUNNING = ("The user stopped the answer while this call ran: its result was not "
                   "waited for (the server may still have done it).")

STOP_POLL_S = 0.1  # how often a running call looks whether the turn was stopped

Approve = Callable[[ToolCallAsked], Decision]


class ChatTools:
    """What a chat needs for MCP tools, in one place its front end owns: the servers of
    mcp.json, the open connections (closed with the front end), the "Allow always" choices."""

    def __init__(self, home: Paths) -> None:
        self.home = home
        self.connections = McpConnections()
        self.approvals = Approvals(home.mcp_approvals)

    def servers(self) -> dict[str, McpServerConfig]:
        """The servers of mcp.json that are not disabled; McpConfigError for a broken file."""
        return {name: c for name, c in load_mcp_config(self.home.mcp_file).items()
                if not c.disabled}

    def servers_or_error(self) -> tuple[dict[str, McpServerConfig], str]:
        try:
            return self.servers(), ""
        except McpConfigError as e:
            return {}, str(e)

    def close(self) -> None:
        self.connections.close()


@dataclass
class Offered:
    """The tools of one answer: the enabled servers that started, and their tools' names."""
    index: ToolIndex
    servers: dict[str, McpServerConfig]


def run_round(calls: tuple[ToolCall, ...], offered: Offered, tools: ChatTools,
              history: History, conversation_id: int, approve: Approve,
              on_event: Callable[[ChatEvent], None],
              stopped: Callable[[], bool]) -> bool:
    """Answer every call of one answer; True: ask the model again, False: stopped."""
    for call in calls:
        _answer_call(call, offered, tools, history, conversation_id, approve, on_event, stopped)
    return not stopped()


def _answer_call(call: ToolCall, offered: Offered, tools: ChatTools, history: History,
                 conversation_id: int, approve: Approve,
                 on_event: Callable[[ChatEvent], None], stopped: Callable[[], bool]) -> None:
    tool = offered.index.by_name.get(call.name)
    stats: dict = {"tool": call.name, "server": tool.server if tool else "",
                   "arguments": call.arguments, "outcome": "pending"}
    message = history.add_message(conversation_id, "tool", NOT_RUN, "streaming", dict(stats),
                                  tool_call_id=call.id, tool_name=call.name)
    on_event(ToolCallStarted(message.id, dict(stats)))

    def settle(outcome: str, text: str, seconds: float | None = None, note: str = "") -> None:
        stats["outcome"] = outcome
        if seconds is not None:
            stats["seconds"] = round(seconds, 3)
        # a failure is a result the model must see (status "complete"), so it can try
        # something else or say what went wrong; "stopped" is given back too, with its text
        history.update_message(message.id, text,
                               "stopped" if outcome == "stopped" else "complete", dict(stats))
        on_event(ToolResult(message.id, call.name, outcome, text, seconds, note))

    if stopped():
        settle("stopped", STOPPED)
        return
    if tool is None:
        names = ", ".join(offered.index.by_name) or "none"
        settle("error", failed_text(f"there is no tool {call.name!r} in this chat "
                                    f"(the tools are: {names})"))
        return
    try:
        arguments = call_arguments(call)
    except InvalidRequestError as e:
        settle("error", failed_text(str(e)))
        return
    server = offered.servers[tool.server]
    note = ""
    if not tools.approvals.allowed(server, tool.name):
        decision = approve(ToolCallAsked(message.id, call.name, tool.server, call.arguments))
        if stopped():
            settle("stopped", STOPPED)
            return
        if decision == "deny":
            settle("denied", denied_text(tool.name))
            return
        if decision == "always":
            try:
                tools.approvals.allow_always(server, tool.name)
            except (McpConfigError, OSError) as e:  # it runs this once; the front end says why
                note = f"Allowed this once: {e}"
    stats["outcome"] = "running"
    history.update_message(message.id, NOT_RUN, stats=dict(stats))
    on_event(ToolResult(message.id, call.name, "running", "", None, note))
    outcome = _call_until_stopped(tools, server, tool.name, arguments, stopped)
    if outcome is None:  # stopped while it ran: its result, when it comes, is dropped
        settle("stopped", STOPPED_RUNNING, note=note)
        return
    if isinstance(outcome, str):
        settle("error", failed_text(outcome), note=note)
        return
    result = outcome
    settle("error" if result.is_error else "ok", result.text, result.seconds, note)


def _call_until_stopped(tools: ChatTools, server: McpServerConfig, tool: str,
                        arguments: dict, stopped: Callable[[], bool]
                        ) -> McpResult | str | None:
    """Run one call on its server: its result, the line that says why it failed, or None
    when the turn was stopped first (a call cannot be taken back from a server once sent:
    it is not waited for)."""
    box: list[McpResult | str] = []
    done = threading.Event()

    def call() -> None:
        try:
            box.append(tools.connections.call(server, tool, arguments))
        except McpServerError as e:
            box.append(str(e))
        except Exception as e:  # a bug must not leave the answer waiting
            box.append(f"MCP server {server.name}: {type(e).__name__}: {e}")
        finally:
            done.set()

    threading.Thread(target=call, name="ember-chat-mcp-call", daemon=True).start()
    while not done.wait(STOP_POLL_S):
        if stopped():
            return None
    return box[0]


def list_tools(tools: ChatTools, servers: dict[str, McpServerConfig]
               ) -> tuple[Offered, dict[str, str]]:
    """Start (or reuse) the connections to `servers` and list their tools; the servers that
    failed, and why."""
    try:
        found, failed = tools.connections.tools(list(servers.values()))
    except Exception as e:  # a bug must not leave the chat waiting forever
        found, failed = [], {name: f"{type(e).__name__}: {e}" for name in servers}
    return Offered(ToolIndex.of(found), {n: c for n, c in servers.items() if n not in failed}), \
        failed
