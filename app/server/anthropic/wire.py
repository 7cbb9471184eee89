"""Ember's answer -> Anthropic's Messages wire: the stop reason, usage, the content blocks of a
whole answer, and the server-sent events of a streamed one (thinking, text and tool_use
blocks, each opened, filled by deltas and closed, a new index each time the kind changes).

Both come from the same events (a DoneEvent is the sum of what was streamed), so a streamed
answer and a whole one say the same thing."""

from __future__ import annotations

import json
import uuid

from app.server.anthropic.schemas import (
    AnthropicUsage,
    ContentBlockOut,
    StopReason,
    TextBlockOut,
    ThinkingBlockOut,
    ToolUseBlockOut,
)
from app.server.errors import ApiError
from backends.base import DoneEvent, OutputEvent, ReasoningEvent, Stats, TokenEvent, ToolCall


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def tool_use_id(call_id: str) -> str:
    """Anthropic's `toolu_...` for a call of Ember's (`call_...`), the same every time, so a
    streamed call and its whole answer agree; a call without an id gets a new one."""
    return "toolu_" + (call_id.removeprefix("call_") or uuid.uuid4().hex[:24])


def stop_reason(stats: Stats) -> StopReason:
    """tool_use, max_tokens, stop_sequence (one of the request's stop strings ended it) or
    end_turn; a cancelled answer ends as end_turn (an error is its own event)."""
    if stats.finish_reason == "tool_calls":
        return "tool_use"
    if stats.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if stats.stop_sequence is not None else "end_turn"


def matched_stop(stats: Stats) -> str | None:
    return stats.stop_sequence if stop_reason(stats) == "stop_sequence" else None


def usage(stats: Stats) -> AnthropicUsage:
    """Prompt tokens reused from Ember's prefix cache are Anthropic's cache reads: they are
    left out of input_tokens, as Anthropic leaves them out."""
    cached = min(stats.cached_tokens, stats.prompt_tokens)
    return AnthropicUsage(input_tokens=stats.prompt_tokens - cached,
                          output_tokens=stats.completion_tokens,
                          cache_read_input_tokens=cached)


def usage_at_start(prompt_tokens: int | None) -> AnthropicUsage:
    """A streamed message's usage in its message_start: the prompt's length as counted
    before generating (0 where none was: a remote model). What the prefix cache reuses is
    known only at the end, so message_delta moves that part to cache_read_input_tokens."""
    return AnthropicUsage(input_tokens=prompt_tokens or 0, output_tokens=0)


def tool_input(call: ToolCall) -> dict:
    """A call's arguments as the object Anthropic's `input` is."""
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ApiError(500, f"the model called {call.name!r} with arguments that are not a "
                       f"JSON object ({call.arguments[:200]!r}); offer the tool with "
                       "tool_choice any or tool to have them constrained to its schema")
    return value


def content(done: DoneEvent, show_thinking: bool = True) -> list[ContentBlockOut]:
    """A whole answer's blocks: its thinking (empty when the request asked for it omitted),
    its text, then its calls."""
    blocks: list[ContentBlockOut] = []
    if done.reasoning:
        blocks.append(ThinkingBlockOut(thinking=done.reasoning if show_thinking else ""))
    if done.text:
        blocks.append(TextBlockOut(text=done.text))
    blocks += [ToolUseBlockOut(id=tool_use_id(c.id), name=c.name, input=tool_input(c))
               for c in done.tool_calls]
    return blocks


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


class StreamBlocks:
    """A streamed answer's events -> Anthropic's block events: a block opens
    (content_block_start) when an event of another kind (or another tool call) comes,
    gets its deltas (thinking_delta, text_delta, input_json_delta with the call's argument
    pieces), and closes (content_block_stop; a thinking block first gets its
    signature_delta, empty, as clients wait for one)."""

    def __init__(self, show_thinking: bool = True) -> None:
        self.show_thinking = show_thinking
        self.index = -1
        self.kind: str | None = None  # "thinking", "text", or "tool_use:N" for call N

    def of(self, event: OutputEvent) -> list[str]:
        if isinstance(event, ReasoningEvent | TokenEvent):
            if not event.text:
                return []
            thinking = isinstance(event, ReasoningEvent)
            kind = "thinking" if thinking else "text"
            out = self._open(kind, ThinkingBlockOut(thinking="") if thinking
                             else TextBlockOut(text=""))
            if thinking and not self.show_thinking:
                return out
            delta = ({"type": "thinking_delta", "thinking": event.text} if thinking
                     else {"type": "text_delta", "text": event.text})
            return out + [self._delta(delta)]
        out = self._open(f"tool_use:{event.index}", ToolUseBlockOut(
            id=tool_use_id(event.id), name=event.name, input={}))
        if event.arguments:
            out.append(self._delta({"type": "input_json_delta",
                                    "partial_json": event.arguments}))
        return out

    def close(self) -> list[str]:
        """Close the open block, if any (before the message's end)."""
        if self.kind is None:
            return []
        out = []
        if self.kind == "thinking":
            out.append(self._delta({"type": "signature_delta", "signature": ""}))
        out.append(sse("content_block_stop", {"type": "content_block_stop",
                                              "index": self.index}))
        self.kind = None
        return out

    def _open(self, kind: str, block: ContentBlockOut) -> list[str]:
        if kind == self.kind:
            return []
        out = self.close()
        self.index += 1
        self.kind = kind
        out.append(sse("content_block_start", {"type": "content_block_start",
                                               "index": self.index,
                                               "content_block": block.model_dump()}))
        return out

    def _delta(self, delta: dict) -> str:
        return sse("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                           "delta": delta})
