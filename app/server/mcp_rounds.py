"""The rounds of one API request under `ember serve --mcp` (app.server.server_tools): the
model is offered the MCP servers' tools beside the client's (and the window's TOOLS_NOTE after
the system prompt); when it calls only MCP tools, the server runs them (or refuses those not
allowed) and asks it again, by the window's rules (app.mcp.tool_loop.next_step: STEP_LIMIT
rounds, once more with tool_choice "none" when it only repeats calls); its answer in words, or
its calls of the client's tools, end the request.

The client sees one answer: the rounds' text and thinking as they stream (a blank line
between rounds that wrote), never the calls of MCP tools (a round that calls client tools too
comes back with the client's calls only, its MCP calls not run), and a final event whose text,
thinking and calls are what was streamed and whose usage sums the rounds. A Responses client
(SHOWS_CALLS) also gets each call that ran, as an McpCallEvent after its round (its mcp_call
item, app.server.responses.mcp), and no blank line: each round's text is an item of its own.

An MCP server is as untrusted as the web: a call's result is capped (its mcp.json
`maxResultBytes`), a server that hangs, dies or fails is a tool-error text the model reads,
and a later round the server cannot start (a 429, a prompt grown past the context) ends the
stream with an error event, never a 500 of the server itself.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Concatenate, ParamSpec, cast

import anyio

from app.mcp.config import McpServerConfig
from app.mcp.connections import McpServerError
from app.mcp.tool_loop import (
    DEFAULT_SYSTEM,
    STEP_LIMIT,
    TOOLS_NOTE,
    ToolIndex,
    call_arguments,
    call_key,
    failed_text,
    next_step,
    refused_text,
)
from app.server.server_tools import McpAsk, ServerTools, asked, leave_out
from backends.base import (
    DoneEvent,
    ErrorEvent,
    Event,
    GenerationRequest,
    LogprobEvent,
    Message,
    ReasoningEvent,
    TokenEvent,
    TokenLogprob,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
)
from backends.errors import InvalidRequestError

log = logging.getLogger(__name__)

OpenRound = Callable[[GenerationRequest], Awaitable[AsyncIterator[Event]]]
P = ParamSpec("P")
OpenEvents = Callable[Concatenate[Any, str, GenerationRequest, str, P],
                      Awaitable[AsyncIterator[Event]]]
BETWEEN_ROUNDS = "\n\n"
SHOWS_CALLS = frozenset({"responses"})  # the endpoints whose clients see the MCP calls


@dataclass(frozen=True)
class McpCallEvent:
    """An MCP call the server ran (or would not run), for an endpoint that shows them
    (SHOWS_CALLS: the Responses API's mcp_call items, app.server.responses.mcp): the call as
    the model made it, its server and the tool's own name there, and what the model read (a
    result, or with `error` why it failed or was not run)."""
    call: ToolCall
    server: str
    tool: str
    output: str
    error: bool = False


def step_limit_text(limit: int = STEP_LIMIT) -> str:
    return (f"[Ember stopped after {limit} rounds of MCP tool calls: the model kept calling "
            "tools without answering.]")


def with_mcp_tools(request: GenerationRequest, index: ToolIndex) -> GenerationRequest:
    """The request with the MCP tools after the client's, and the window's note to answer
    from a tool's result after the system prompt (small models repeat calls without it); a
    400 when a name is both the client's and an MCP tool's."""
    for tool in request.tools:
        if tool.name in index.by_name:
            mcp = index.by_name[tool.name]
            raise InvalidRequestError(
                f"tool {tool.name!r} is both one of this request's tools and MCP server "
                f"{mcp.server}'s: rename the request's tool, or ask for other servers", "tools")
    if not index.by_name:
        return request
    messages = request.messages or ()
    if messages and messages[0].role == "system":
        system = replace(messages[0], content=f"{messages[0].content.rstrip()} {TOOLS_NOTE}")
        messages = (system, *messages[1:])
    else:
        messages = (Message("system", f"{DEFAULT_SYSTEM} {TOOLS_NOTE}"), *messages)
    return replace(request, messages=messages, tools=request.tools + index.request_tools())


def split_calls(calls: tuple[ToolCall, ...], index: ToolIndex
                ) -> tuple[tuple[ToolCall, ...], tuple[ToolCall, ...]]:
    """An answer's calls of MCP tools, and the client's (any other name)."""
    return (tuple(c for c in calls if c.name in index.by_name),
            tuple(c for c in calls if c.name not in index.by_name))


class RoundFilter:
    """One round's events as the client sees them: no call of an MCP tool, the client's calls
    numbered from 0, and a blank line before its first text (or thinking) when an earlier
    round's text (thinking) was sent."""

    def __init__(self, index: ToolIndex, text_before: str = "",
                 reasoning_before: str = "") -> None:
        self.index = index
        self._numbers: dict[int, int | None] = {}
        self._text_gap = bool(text_before) and not text_before[-1].isspace()
        self._reasoning_gap = bool(reasoning_before) and not reasoning_before[-1].isspace()

    def __call__(self, event: Event) -> list[Event]:
        if isinstance(event, ToolCallEvent):
            if event.index not in self._numbers:
                mcp = event.name in self.index.by_name
                clients = sum(n is not None for n in self._numbers.values())
                self._numbers[event.index] = None if mcp else clients
            number = self._numbers[event.index]
            return [] if number is None else [replace(event, index=number)]
        if isinstance(event, TokenEvent) and event.text and self._text_gap:
            self._text_gap = False
            return [TokenEvent(BETWEEN_ROUNDS), event]
        if isinstance(event, ReasoningEvent) and event.text and self._reasoning_gap:
            self._reasoning_gap = False
            return [ReasoningEvent(BETWEEN_ROUNDS), event]
        return [event]


def after_calls(request: GenerationRequest, done: DoneEvent, calls: tuple[ToolCall, ...],
                results: list[str]) -> GenerationRequest:
    """The next round's request: the answer with its calls, their results, and tool_choice
    "auto" (a forced call was the first round's; forcing again would never end)."""
    turns = (Message("assistant", done.text, done.reasoning, calls),
             *(Message("tool", text, tool_call_id=c.id, name=c.name)
               for c, text in zip(calls, results, strict=True)))
    return replace(request, messages=(*(request.messages or ()), *turns),
                   tool_choice=ToolChoice(), id=uuid.uuid4().hex)


def combined(dones: list[DoneEvent], text: str, reasoning: str,
             calls: tuple[ToolCall, ...], logprobs: tuple[TokenLogprob, ...],
             seconds: float) -> DoneEvent:
    """The request's final event: what was streamed, the rounds' usage summed (every round
    read its whole prompt), the last round's finish and speed ("stop" for calls of MCP tools
    the step limit left unrun: the client gets no calls)."""
    first, last = dones[0].stats, dones[-1].stats
    finish = "stop" if last.finish_reason == "tool_calls" and not calls else last.finish_reason
    stats = replace(
        last, ttft_s=first.ttft_s, total_s=seconds, finish_reason=finish,
        prompt_tokens=sum(d.stats.prompt_tokens for d in dones),
        completion_tokens=sum(d.stats.completion_tokens for d in dones),
        cached_tokens=sum(d.stats.cached_tokens for d in dones),
        disk_tokens=sum(d.stats.disk_tokens for d in dones),
        draft_tokens=sum(d.stats.draft_tokens for d in dones),
        accepted_tokens=sum(d.stats.accepted_tokens for d in dones),
        reasoning_tokens=sum(d.stats.reasoning_tokens for d in dones),
        truncated=any(d.stats.truncated for d in dones))
    return DoneEvent(stats, text, reasoning, calls, logprobs)


def run_call(tools: ServerTools, servers: dict[str, McpServerConfig], index: ToolIndex,
             call: ToolCall) -> McpCallEvent:
    """One call of an MCP tool (blocking; never raises): its `output` is what the model reads,
    the result, or why the call was refused or failed (then `error`)."""
    tool = index.by_name[call.name]
    config = servers[tool.server]

    def ran(output: str, error: bool) -> McpCallEvent:
        return McpCallEvent(call, tool.server, tool.name, output, error)

    if not tools.allowed(config, tool.name):
        log.warning("MCP call %s/%s refused: not allowed for API clients", tool.server,
                    tool.name)
        return ran(refused_text(tool.server, tool.name), True)
    try:
        result = tools.connections.call(config, tool.name, call_arguments(call))
    except (InvalidRequestError, McpServerError) as e:
        outcome = failed_text(str(e))
    except Exception as e:  # a broken server must not break the request
        outcome = failed_text(f"MCP server {config.name}: {type(e).__name__}: {e}")
    else:
        log.info("MCP call %s/%s: %s in %.2f s", tool.server, tool.name,
                 "error" if result.is_error else "ok", result.seconds)
        return ran(result.text, result.is_error)
    log.warning("MCP call %s/%s failed: %s", tool.server, tool.name, outcome)
    return ran(outcome, True)


def with_mcp(open_events: OpenEvents[P]) -> OpenEvents[P]:
    """The hook on app.server.bridge.open_events(state, model, request, ...): a request that
    asked for MCP servers (server_tools.asked) on a server started with --mcp goes through
    open_with_mcp, each round opened by open_events itself with the same arguments."""
    @functools.wraps(open_events)
    async def hooked(state: Any, model: str, request: GenerationRequest, endpoint: str,
                     *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[Event]:
        ask, tools = asked(), getattr(state, "server_tools", None)
        if ask is None or tools is None:
            return await open_events(state, model, request, endpoint, *args, **kwargs)
        events = await open_with_mcp(tools, ask, request, lambda r: open_events(
            state, model, r, endpoint, *args, **kwargs), endpoint in SHOWS_CALLS)
        # McpCallEvents only for SHOWS_CALLS, whose routes take them
        return cast(AsyncIterator[Event], events)
    return hooked


async def open_with_mcp(tools: ServerTools, ask: McpAsk, request: GenerationRequest,
                        open_round: OpenRound, show_calls: bool = False
                        ) -> AsyncIterator[Event | McpCallEvent]:
    """A request that asked for MCP servers: their tools offered (400s and the 502 of a
    server that cannot start come here, before any response), then the rounds' events (with
    `show_calls`, an McpCallEvent for each call run, after its round)."""
    if request.messages is None:
        raise InvalidRequestError("MCP tools need a chat request (messages), not a raw "
                                  "prompt", "mcp")
    servers = tools.servers(ask)
    index, failed = await anyio.to_thread.run_sync(tools.index, servers, ask)
    leave_out(failed)
    first = with_mcp_tools(request, index)
    events = await open_round(first)
    return rounds(tools, servers, index, first, events, open_round, show_calls)


async def rounds(tools: ServerTools, servers: dict[str, McpServerConfig], index: ToolIndex,
                 request: GenerationRequest, events: AsyncIterator[Event],
                 open_round: OpenRound, show_calls: bool = False
                 ) -> AsyncIterator[Event | McpCallEvent]:
    """The events the client sees, round after round, until an answer in words, calls of the
    client's tools, the step limit or an error; with `show_calls`, each round's MCP calls as
    McpCallEvents once they ran (and no blank line between rounds: a client that sees the
    calls gets each round's text as an item of its own)."""
    started = time.monotonic()
    dones: list[DoneEvent] = []
    text = reasoning = ""
    logprobs: list[TokenLogprob] = []
    made: set[tuple[str, str]] = set()
    steps, asked_for_words = 0, False
    while True:
        keep = RoundFilter(index, "" if show_calls else text,
                           "" if show_calls else reasoning)
        done: DoneEvent | None = None
        try:
            async for event in events:
                if isinstance(event, DoneEvent):
                    done = event
                    break
                for out in keep(event):
                    if isinstance(out, TokenEvent):
                        text += out.text
                    elif isinstance(out, ReasoningEvent):
                        reasoning += out.text
                    elif isinstance(out, LogprobEvent):
                        logprobs.append(out.entry)
                    yield out
                if isinstance(event, ErrorEvent):
                    return
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        if done is None:
            return
        dones.append(done)
        mcp_calls, client_calls = split_calls(done.tool_calls, index)
        step = "answer" if client_calls else next_step(mcp_calls, made, asked_for_words, steps)
        if client_calls and mcp_calls:
            log.warning("MCP calls not run: the answer also called the client's tools (%s)",
                        ", ".join(c.name for c in mcp_calls))
        if step == "run":
            steps += 1
            made.update(call_key(c) for c in mcp_calls)
            ran = [await anyio.to_thread.run_sync(run_call, tools, servers, index, c,
                                                  abandon_on_cancel=True)
                   for c in mcp_calls]
            if show_calls:
                for shown in ran:
                    yield shown
            request = after_calls(request, done, mcp_calls, [r.output for r in ran])
        elif step == "ask_for_words":
            asked_for_words = True
            request = replace(request, tool_choice=ToolChoice("none"), id=uuid.uuid4().hex)
        else:
            if step == "step_limit":
                note = (BETWEEN_ROUNDS if text else "") + step_limit_text()
                text += note
                yield TokenEvent(note)
            yield combined(dones, text, reasoning, client_calls, tuple(logprobs),
                           time.monotonic() - started)
            return
        try:
            events = await open_round(request)
        except Exception as e:  # a 429, a prompt past the context: the stream has begun
            yield ErrorEvent(f"after MCP tool calls: {e}",
                             "invalid" if isinstance(e, InvalidRequestError) else "backend")
            return

