"""Ember's answer -> Ollama's wire (docs/wire-formats.md C.4): the message of a whole
answer, and the NDJSON pieces of a streamed one, where thinking comes in pieces and each tool
call whole, in one line, with its arguments as an object. Both come from the same events, so
they say the same thing (the `call_...` ids Ember makes up aside)."""

from __future__ import annotations

import json
import logging
import uuid

from backends.base import (
    DoneEvent,
    OutputEvent,
    ReasoningEvent,
    TokenEvent,
    ToolCall,
    ToolCallEvent,
)

log = logging.getLogger(__name__)


def done_reason(finish_reason: str) -> str:
    """Ollama's native API says "stop" for an answer that called tools too."""
    return "length" if finish_reason == "length" else "stop"


def _arguments(call: ToolCall) -> dict:
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        value = None
    if not isinstance(value, dict):
        # Only a model decoding without a grammar can write this; Ollama's wire has no
        # place for arguments that are not an object.
        log.warning("tool call %s: its arguments are not a JSON object, sent as {}: %.200s",
                    call.name, call.arguments)
        return {}
    return value


def tool_call(call: ToolCall, index: int) -> dict:
    return {"id": call.id or f"call_{uuid.uuid4().hex[:24]}",
            "function": {"index": index, "name": call.name, "arguments": _arguments(call)}}


def message(done: DoneEvent) -> dict:
    """A whole answer's message: thinking and tool calls only when there are some."""
    out: dict = {"role": "assistant", "content": done.text}
    if done.reasoning:
        out["thinking"] = done.reasoning
    if done.tool_calls:
        out["tool_calls"] = [tool_call(c, i) for i, c in enumerate(done.tool_calls)]
    return out


class Pieces:
    """A streamed answer's events -> the message parts of its NDJSON lines. A tool call is
    held until it is whole: when the next call or other text starts, or at the end (where a
    call that max_tokens cut off is not in the DoneEvent, and so never sent)."""

    def __init__(self) -> None:
        self._calls: dict[int, list[str]] = {}  # index -> id, name, arguments so far
        self._sent = 0  # calls sent, in index order

    def of(self, event: OutputEvent) -> list[dict]:
        if isinstance(event, ToolCallEvent):
            out = self._whole(before=event.index)
            call = self._calls.setdefault(event.index, ["", "", ""])
            call[0], call[1] = call[0] or event.id, call[1] or event.name
            call[2] += event.arguments
            return out
        out = self._whole(before=len(self._calls))
        if isinstance(event, TokenEvent) and event.text:
            out.append({"content": event.text})
        elif isinstance(event, ReasoningEvent) and event.text:
            out.append({"content": "", "thinking": event.text})
        return out

    def end(self, done: DoneEvent) -> list[dict]:
        return self._whole(before=len(done.tool_calls))

    def _whole(self, before: int) -> list[dict]:
        out = []
        while self._sent < before and self._sent in self._calls:
            call_id, name, arguments = self._calls[self._sent]
            call = ToolCall(call_id, name, arguments or "{}")
            out.append({"content": "", "tool_calls": [tool_call(call, self._sent)]})
            self._sent += 1
        return out
