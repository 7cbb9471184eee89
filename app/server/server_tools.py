"""`ember serve --mcp`: the MCP servers of mcp.json offered to API requests that ask for them.

A chat request asks in its JSON body, on any dialect (OpenAI chat completions, Responses,
Anthropic Messages, Ollama /api/chat):

    "mcp": true                    every enabled server of mcp.json
    "mcp": ["files", "search"]     those servers, by name
    "integrations": ["mcp/files", {"type": "plugin", "id": "mcp/search",
                                   "allowed_tools": ["web_search"]}]   (LM Studio's shape)

The servers' tools are offered beside the client's own; the model's calls of them are run by
the server (app.server.mcp_rounds) and the final answer comes back, while calls of the
client's tools come back to the client as usual. No one is there to click "Allow": a call runs
only when its tool is allowed always (the window's "Allow always", app.mcp.approvals) or listed
with `--mcp-allow SERVER/TOOL` (`SERVER/*`: all its tools); any other call is refused and the
model told why. Without --mcp a request that asks is a 400.

The ask is read by `McpAskReader`, a pure ASGI middleware, from the body the route parses
anyway, so the dialects' schemas stay as they are; `asked()` hands it to the bridge.
"""

from __future__ import annotations

import contextvars
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.mcp.approvals import Approvals
from app.mcp.config import McpConfigError, McpServerConfig, load_mcp_config
from app.mcp.connections import McpConnections
from app.mcp.tool_loop import ToolIndex
from app.server.errors import ApiError, error_body
from app.server.generation_request import LEFT_OUT_HEADER
from backends.errors import InvalidRequestError, RemoteError

log = logging.getLogger(__name__)

# the routes whose requests may ask: chats, where the model's calls can be answered
CHAT_PATHS = frozenset({"/v1/chat/completions", "/v1/responses", "/v1/messages", "/api/chat"})
FIELDS = ("mcp", "integrations")
WITHOUT_MCP = ("this request asks for MCP tools ({field}), but the Ember server was started "
               "without --mcp: start it with `ember serve --mcp` (or EMBER_SERVE_MCP=1) to "
               "offer the servers of mcp.json to API clients")


@dataclass(frozen=True)
class McpAsk:
    """The servers a request asked for (`servers` None: every enabled one), and for some of
    them the only tools it wants offered (LM Studio's allowed_tools)."""
    servers: tuple[str, ...] | None
    only: dict[str, frozenset[str]] = field(default_factory=dict)


def parse_ask(body: Any) -> McpAsk | None:
    """The request body's ask, None when it has none; InvalidRequestError names what is wrong."""
    if not isinstance(body, dict):
        return None
    if "mcp" in body and "integrations" in body:
        raise InvalidRequestError("ask for MCP servers with \"mcp\" or \"integrations\", not "
                                  "both", "mcp")
    if "mcp" in body:
        value = body["mcp"]
        if value is True:
            return McpAsk(None)
        if value is False or value is None:
            return None
        if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
            return McpAsk(tuple(dict.fromkeys(value)))
        raise InvalidRequestError("mcp must be true (every enabled server of mcp.json) or a "
                                  "list of server names, like [\"files\"]", "mcp")
    if "integrations" in body:
        return _integrations(body["integrations"])
    return None


def _integrations(value: Any) -> McpAsk | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidRequestError("integrations must be a list, like [\"mcp/files\"]",
                                  "integrations")
    servers: list[str] = []
    only: dict[str, frozenset[str]] = {}
    for i, item in enumerate(value):
        where = f"integrations[{i}]"
        ident, tools = item, None
        if isinstance(item, dict):
            if item.get("type", "plugin") != "plugin":
                raise InvalidRequestError(
                    f"{where}: type {item.get('type')!r} is not supported: Ember runs only "
                    "the servers of its mcp.json ({\"type\": \"plugin\", \"id\": "
                    "\"mcp/NAME\"})", where)
            ident, tools = item.get("id"), item.get("allowed_tools")
            if tools is not None and not (isinstance(tools, list)
                                          and all(isinstance(t, str) for t in tools)):
                raise InvalidRequestError(f"{where}.allowed_tools must be a list of tool names",
                                          where)
        if not isinstance(ident, str) or not ident.startswith("mcp/") or len(ident) < 5:
            raise InvalidRequestError(f"{where}: an MCP server of mcp.json is named "
                                      f"\"mcp/NAME\", got {ident!r}", where)
        name = ident.removeprefix("mcp/")
        servers.append(name)
        if tools is not None:
            only[name] = frozenset(tools)
    return McpAsk(tuple(dict.fromkeys(servers)), only) if servers else None


def allow_rule(text: str) -> str:
    """A --mcp-allow entry, checked: SERVER/TOOL or SERVER/*."""
    server, slash, tool = text.partition("/")
    if not slash or not server or not tool:
        raise McpConfigError(f"--mcp-allow {text!r}: name a server's tool as SERVER/TOOL "
                             "(or SERVER/* for all its tools)")
    return text


class ServerTools:
    """What `ember serve --mcp` holds: where mcp.json and the approvals are, the --mcp-allow
    list, and the open connections (closed with the server)."""

    def __init__(self, home: Path, allow: tuple[str, ...] = (),
                 connections: McpConnections | None = None) -> None:
        self.mcp_file = home / "mcp.json"
        self.approvals = Approvals(home / "mcp-approvals.json")
        self.allow = frozenset(allow_rule(a) for a in allow)
        self.connections = connections or McpConnections()

    def servers(self, ask: McpAsk) -> dict[str, McpServerConfig]:
        """The servers the request asked for; a 400 names one that mcp.json lacks or
        disables, or the file's problem."""
        try:
            configured = load_mcp_config(self.mcp_file)
        except McpConfigError as e:
            raise InvalidRequestError(f"MCP tools are off: {e}", "mcp") from None
        enabled = {name: c for name, c in configured.items() if not c.disabled}
        if ask.servers is None:
            return enabled
        for name in ask.servers:
            if name not in enabled:
                why = "is disabled in" if name in configured else "is not in"
                raise InvalidRequestError(
                    f"MCP server {name!r} {why} {self.mcp_file} (its enabled servers: "
                    f"{', '.join(enabled) or 'none'})", "mcp")
        return {name: enabled[name] for name in ask.servers}

    def index(self, servers: dict[str, McpServerConfig], ask: McpAsk
              ) -> tuple[ToolIndex, dict[str, str]]:
        """The servers' tools (started as needed; blocking), and the servers left out: with
        `"mcp": true` one that cannot start or list its tools is left out (its line logged
        and returned), unless every one failed; a server the request named is a 502 that
        says why (the client asked for it by name)."""
        tools, failed = self.connections.tools(servers.values())
        if failed and (ask.servers is not None or len(failed) == len(servers)):
            raise RemoteError("; ".join(failed.values()))
        for name, why in failed.items():
            log.warning("MCP server %s left out of this request: %s", name, why)
        tools = [t for t in tools if t.server not in ask.only or t.name in ask.only[t.server]]
        index = ToolIndex.of(tools)
        for name, why in index.problems.items():
            log.warning("MCP tool %s left out: %s", name, why)
        return index, failed

    def allowed(self, config: McpServerConfig, tool: str) -> bool:
        return (f"{config.name}/{tool}" in self.allow or f"{config.name}/*" in self.allow
                or self.approvals.allowed(config, tool))

    def close(self) -> None:
        self.connections.close()


_asked: contextvars.ContextVar[McpAsk | None] = contextvars.ContextVar("ember_mcp_ask",
                                                                      default=None)


def asked() -> McpAsk | None:
    """The MCP ask of the request being served (set by McpAskReader), None without one."""
    return _asked.get()


# the servers left out of the request being served, for LEFT_OUT_HEADER (set by McpAskReader)
_left_out: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "ember_mcp_left_out", default=None)
MAX_REASON = 200  # characters of a left-out server's line in the header


def left_out_entry(server: str, why: str) -> str:
    """A server left out, as LEFT_OUT_HEADER names it: `mcp:NAME (ITS LINE)`, the line made
    fit for a header that is a comma-separated list (one line of latin-1, commas as ';', cut
    at MAX_REASON characters)."""
    line = " ".join(why.split()).replace(",", ";")
    line = line.encode("latin-1", "replace").decode("latin-1")
    if len(line) > MAX_REASON:
        line = line[:MAX_REASON - 3] + "..."
    return f"mcp:{server} ({line})"


def leave_out(failed: dict[str, str]) -> None:
    """Name the servers left out of the request being served in its LEFT_OUT_HEADER."""
    entries = _left_out.get()
    if entries is not None:
        entries.extend(left_out_entry(name, why) for name, why in failed.items())


def with_left_out(message: Message, entries: list[str]) -> Message:
    """A response's start with `entries` added to its LEFT_OUT_HEADER (after what the route
    named: the hosted tools it left out)."""
    if message["type"] != "http.response.start" or not entries:
        return message
    name = LEFT_OUT_HEADER.encode("latin-1")
    headers = list(message.get("headers", []))
    values = [v.decode("latin-1") for k, v in headers if k.lower() == name]
    headers = [(k, v) for k, v in headers if k.lower() != name]
    headers.append((name, ", ".join([*values, *entries]).encode("latin-1")))
    return {**message, "headers": headers}


class McpAskReader:
    """Pure ASGI: reads a POST's body, and when it has an "mcp" or "integrations" field,
    checks it (a 400 in the route's API shape: a bad ask, a route without chats, a server
    started without --mcp) and keeps it for the bridge; the body then goes on unchanged."""

    def __init__(self, app: ASGIApp, enabled: bool) -> None:
        self.app, self.enabled = app, enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        messages: list[Message] = []
        try:
            while True:
                message = await receive()  # the Guard's: a body over the limit is a 413
                messages.append(message)
                if message["type"] != "http.request" or not message.get("more_body", False):
                    break
            body = b"".join(m.get("body", b"") for m in messages
                            if m["type"] == "http.request")
            ask = _read(body, scope["path"], self.enabled)
        except ApiError as err:  # raised here, outside the routes' error handlers
            await _answer(scope, send, err)
            return
        except InvalidRequestError as e:
            await _answer(scope, send, ApiError(400, str(e), param=e.param))
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        entries: list[str] = []

        async def send_named(message: Message) -> None:
            await send(with_left_out(message, entries))

        token, left_token = _asked.set(ask), _left_out.set(entries)
        try:
            await self.app(scope, replay, send_named if ask is not None else send)
        finally:
            _left_out.reset(left_token)
            _asked.reset(token)


def _read(body: bytes, path: str, enabled: bool) -> McpAsk | None:
    if b'"mcp"' not in body and b'"integrations"' not in body:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None  # the route says the body is not JSON
    ask = parse_ask(data)
    if ask is None:
        return None
    where = "mcp" if "mcp" in data else "integrations"
    if not enabled:
        raise InvalidRequestError(WITHOUT_MCP.format(field=where), where)
    if path not in CHAT_PATHS:
        raise InvalidRequestError(f"MCP tools are offered to chat requests only ("
                                  f"{', '.join(sorted(CHAT_PATHS))}), not {path}", where)
    return ask


async def _answer(scope: Scope, send: Send, err: ApiError) -> None:
    from fastapi.responses import JSONResponse

    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    response = JSONResponse(error_body(scope["path"], err), status_code=err.status,
                            headers=err.headers)
    await response(scope, nothing, send)


def start(enabled: bool, home: Path | None, allow: tuple[str, ...]) -> ServerTools | None:
    """The server's MCP side: None without --mcp; with it, the mcp SDK must be there."""
    if not enabled:
        if allow:
            raise McpConfigError("--mcp-allow needs --mcp")
        return None
    try:
        import mcp  # noqa: F401
    except ImportError as e:
        from app.install_hint import needs_extra

        raise McpConfigError(needs_extra("ember serve --mcp", "gui", e.name)) from e
    if home is None:
        from app.config import paths

        home = paths().home
    return ServerTools(home, allow)
