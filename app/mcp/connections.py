"""Live connections to MCP servers, through the official `mcp` SDK, on an event loop of their own.

The SDK is asyncio (anyio); the window is Qt. One daemon thread runs an asyncio loop that
holds every open connection; the blocking methods here (`tools`, `call`, `close`) are called
from a chat turn's thread (app.chat.tools), never from the window's UI thread.

A connection stays open between calls (starting `npx some-server` takes seconds), in a task
that keeps the SDK's `Client` context entered (anyio requires entering and leaving it in the
same task). It is reopened when its entry in mcp.json changes, and after the server died.

Every failure ends as an McpServerError with one line a user can act on: the server could not
start (with the last line it wrote to stderr), did not answer in time, stopped, or wrote
something that is not MCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from app.mcp.config import STARTUP_TIMEOUT_S, McpServerConfig
from backends.errors import EmberError

log = logging.getLogger(__name__)
CLOSE_TIMEOUT_S = 5.0
CONNECTION_CLOSED = -32000  # mcp_types.CONNECTION_CLOSED: the SDK's error for a closed link


class McpServerError(EmberError):
    """A server failed; the message is the one line its tool card shows."""


@dataclass(frozen=True)
class McpTool:
    """A tool as its server describes it; `parameters` is its JSON schema of arguments."""
    server: str
    name: str
    description: str
    parameters: dict


@dataclass(frozen=True)
class McpResult:
    """A finished call: the text the model is given, whether the tool reported an error."""
    text: str
    is_error: bool
    seconds: float


def result_text(result: Any) -> str:
    """The model's view of a CallToolResult: its text blocks, then its structured content as
    JSON when there is no text; other blocks (images, audio, resources) are named, since a
    text model cannot take them."""
    import json

    parts: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content, not shown to the model]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def capped(text: str, limit: int) -> str:
    """At most `limit` bytes of a tool's result for the model, with a note that says it was
    cut (a server may answer megabytes: the model's context, and the history, take a bounded
    share)."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", errors="ignore")
    return (f"{kept}\n[result cut: the tool returned {len(data):,} bytes; the first "
            f"{limit:,} are shown]")


def _last_line(stderr: IO[str] | None) -> str:
    if stderr is None:
        return ""
    try:
        stderr.flush()
        stderr.seek(0)
        lines = [line.strip() for line in stderr.read().splitlines() if line.strip()]
    except (OSError, ValueError):
        return ""
    return lines[-1][:300] if lines else ""


@dataclass
class _Connection:
    config: McpServerConfig
    tools: list[McpTool] = field(default_factory=list)
    client: Any = None  # mcp.Client, entered
    task: asyncio.Task | None = None
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    stderr: IO[str] | None = None
    not_mcp: str = ""  # the last line the server wrote that was not an MCP message
    ended: BaseException | None = None  # why the connection ended, once it has

    @property
    def alive(self) -> bool:
        return self.client is not None and self.task is not None and not self.task.done()

    def why(self, fallback: str) -> str:
        """The line a card shows for a failure of this server."""
        name = self.config.name
        if self.not_mcp:
            return (f"MCP server {name} wrote something that is not MCP: {self.not_mcp}; "
                    "check its command in mcp.json")
        said = _last_line(self.stderr)
        return f"MCP server {name} {fallback}" + (f": {said}" if said else "")


def _not_mcp(error: Exception) -> str:
    """What the server wrote, from the SDK's parse error (pydantic keeps the input)."""
    errors = getattr(error, "errors", None)
    try:
        line = errors()[0].get("input") if callable(errors) else None
    except (IndexError, TypeError, AttributeError):
        line = None
    text = line if isinstance(line, str) else _describe(error)
    return repr(text[:120])


def _describe(error: BaseException) -> str:
    # anyio and the SDK raise exception groups; the first leaf says what happened
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


class McpConnections:
    """The open MCP connections, by server name. Thread-safe; blocking; close() when done."""

    def __init__(self, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self.startup_timeout_s = startup_timeout_s
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: dict[str, _Connection] = {}
        # one start per server at a time: the API server's requests (`ember serve --mcp`)
        # come together, and a second start would close the first one while it starts
        self._starting: dict[str, asyncio.Lock] = {}

    # the loop thread

    def _run(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="ember-mcp", daemon=True).start()
                self._loop = loop
            loop = self._loop
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    # the public, blocking side

    def tools(self, servers: Iterable[McpServerConfig]) -> tuple[list[McpTool], dict[str, str]]:
        """The tools of `servers` (each started or reached as needed), and a line for each
        server that failed."""
        found: list[McpTool] = []
        failed: dict[str, str] = {}
        for config in servers:
            try:
                found += self._run(self._tools(config), self.startup_timeout_s + 10)
            except McpServerError as e:
                failed[config.name] = str(e)
            except TimeoutError:
                failed[config.name] = f"MCP server {config.name} did not answer in time"
        return found, failed

    def call(self, config: McpServerConfig, tool: str, arguments: dict) -> McpResult:
        """Run `tool` on its server; an McpServerError says why it could not."""
        try:
            return self._run(self._call(config, tool, arguments),
                             self.startup_timeout_s + config.timeout_s + 10)
        except TimeoutError:
            raise McpServerError(f"MCP server {config.name} did not answer in time") from None

    def close(self) -> None:
        """End every connection (stdio servers are stopped) and the loop's thread."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(TimeoutError, RuntimeError):
            self._run(self._close_all(), CLOSE_TIMEOUT_S + 5)
        loop.call_soon_threadsafe(loop.stop)
        self._loop = None

    # on the loop

    async def _tools(self, config: McpServerConfig) -> list[McpTool]:
        return (await self._connection(config)).tools

    async def _connection(self, config: McpServerConfig) -> _Connection:
        async with self._starting.setdefault(config.name, asyncio.Lock()):
            return await self._open(config)

    async def _open(self, config: McpServerConfig) -> _Connection:
        conn = self._connections.get(config.name)
        if conn is not None and conn.alive and conn.config == config:
            return conn
        if conn is not None:
            await self._close(conn)
        conn = _Connection(config)
        self._connections[config.name] = conn
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.task = asyncio.create_task(self._hold(conn, ready), name=f"mcp-{config.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.startup_timeout_s)
        except TimeoutError:
            why = conn.why(f"did not get ready within {self.startup_timeout_s:g} s")
            await self._close(conn)
            raise McpServerError(why) from None
        except McpServerError:
            await self._close(conn)
            raise
        return conn

    async def _hold(self, conn: _Connection, ready: asyncio.Future[None]) -> None:
        """Open the connection, list its tools, and keep it open until asked to close."""
        from mcp import Client

        config = conn.config

        async def note(message: Any) -> None:  # the SDK's transport errors: a line not MCP
            if isinstance(message, Exception):
                conn.not_mcp = _not_mcp(message)

        try:
            target: Any
            if config.command:
                from mcp import StdioServerParameters, stdio_client

                params = StdioServerParameters(command=config.command, args=list(config.args),
                                               env=config.env or None, cwd=config.cwd)
                # the server's stderr goes to a file of Ember's, not to the window's stderr
                # where no user sees it: its last line explains a failure
                conn.stderr = tempfile.TemporaryFile(  # noqa: SIM115 (closed in _close)
                    "w+", encoding="utf-8", errors="replace")
                target = stdio_client(params, errlog=conn.stderr)
            else:
                target = _http_transport(config)
            async with Client(target, read_timeout_seconds=config.timeout_s,
                              message_handler=note) as client:
                conn.tools = await _list_tools(client, config.name)
                conn.client = client
                ready.set_result(None)
                await conn.closing.wait()
        except BaseException as e:
            conn.ended = e
            if isinstance(e, asyncio.CancelledError):
                ready.cancel()  # the start timed out: _connection has reported it
                raise
            if not ready.done():
                what = ("could not be reached" if config.url else "could not be started"
                        if isinstance(e, OSError) else "stopped before it was ready")
                ready.set_exception(McpServerError(conn.why(f"{what} ({_describe(e)})")))
        finally:
            conn.client = None

    async def _call(self, config: McpServerConfig, tool: str, arguments: dict) -> McpResult:
        conn = await self._connection(config)
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(conn.client.call_tool(tool, arguments),
                                            config.timeout_s)
        except TimeoutError:
            raise McpServerError(conn.why(f"did not answer within {config.timeout_s:g} s")
                                 ) from None
        except Exception as e:
            if getattr(getattr(e, "error", None), "code", None) == CONNECTION_CLOSED:
                # the server died (or hung up): the next call starts it again
                why = conn.why("stopped during the call")
                await self._close(conn)
                raise McpServerError(why) from None
            raise McpServerError(f"MCP server {config.name}: {_describe(e)}") from None
        try:
            text = capped(result_text(result), config.max_result_bytes)
        except AttributeError as e:
            raise McpServerError(f"MCP server {config.name} answered with a result Ember "
                                 f"cannot read ({e})") from None
        return McpResult(text, bool(result.is_error), time.monotonic() - started)

    async def _close(self, conn: _Connection) -> None:
        conn.closing.set()
        task = conn.task
        if task is not None and conn.client is None:
            task.cancel()  # still starting: nothing to close politely
        if task is not None and not task.done():
            # asyncio.wait: the task's own end (an error, a cancellation) is not raised here
            await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)
            if not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)
        if conn.stderr is not None:
            conn.stderr.close()
        if self._connections.get(conn.config.name) is conn:
            del self._connections[conn.config.name]

    async def _close_all(self) -> None:
        for conn in list(self._connections.values()):
            await self._close(conn)


async def _list_tools(client: Any, server: str) -> list[McpTool]:
    tools: list[McpTool] = []
    cursor = None
    for _ in range(100):  # a server whose pages never end cannot hang the chat
        page = await client.list_tools(cursor=cursor)
        tools += [McpTool(server, t.name, t.description or "", dict(t.input_schema))
                  for t in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _http_transport(config: McpServerConfig) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    client = httpx2.AsyncClient(headers=config.headers,
                                timeout=httpx2.Timeout(config.timeout_s, read=config.timeout_s))
    return _HttpTransport(client, streamable_http_client(config.url or "", http_client=client))


class _HttpTransport:
    """streamable_http_client with Ember's own HTTP client (it carries the mcp.json
    headers), closed with it: the SDK leaves a client it was given open."""

    def __init__(self, http: Any, manager: Any) -> None:
        self._http, self._manager = http, manager

    async def __aenter__(self) -> Any:
        return await self._manager.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._manager.__aexit__(*exc)
        finally:
            await self._http.aclose()
