"""Ember's answer -> OpenAI's wire: the finish reason, usage, the assistant message of a whole
answer, and the deltas of a streamed one (docs/wire-formats.md C.2, C.3).

Both come from the same events (a DoneEvent is the sum of what was streamed), so a streamed
answer and a whole one say the same thing; only the `call_...` ids Ember makes up for calls
differ between two requests."""

from __future__ import annotations

import uuid

from app.server.openai.schemas import (
    AssistantMessage,
    CompletionLogprobs,
    CompletionTokensDetails,
    FunctionCall,
    PromptTokensDetails,
    ReasoningField,
    TokenLogprobOut,
    ToolCallOut,
    TopLogprobOut,
    Usage,
)
from backends.base import (
    DoneEvent,
    OutputEvent,
    ReasoningEvent,
    Stats,
    TokenEvent,
    TokenLogprob,
    ToolCall,
    ToolCallEvent,
    TopLogprob,
)


def finish_reason(stats: Stats) -> str:
    """stop, length or tool_calls; a cancelled or failed request ends as stop (its error, if
    any, was its own event)."""
    if stats.finish_reason in ("length", "tool_calls"):
        return stats.finish_reason
    return "stop"


def usage(stats: Stats) -> Usage:
    details = CompletionTokensDetails(reasoning_tokens=stats.reasoning_tokens)
    if stats.draft_tokens:  # speculative decoding's proposals, as OpenAI counts predictions
        details.accepted_prediction_tokens = stats.accepted_tokens
        details.rejected_prediction_tokens = stats.draft_tokens - stats.accepted_tokens
    cached = PromptTokensDetails(cached_tokens=min(stats.cached_tokens, stats.prompt_tokens),
                                 disk_tokens=min(stats.disk_tokens, stats.cached_tokens))
    return Usage(prompt_tokens=stats.prompt_tokens, completion_tokens=stats.completion_tokens,
                 total_tokens=stats.prompt_tokens + stats.completion_tokens,
                 prompt_tokens_details=cached, completion_tokens_details=details,
                 truncated=True if stats.truncated else None)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _reasoning(text: str, field: ReasoningField) -> dict[str, str]:
    if not text:
        return {}
    names = ("reasoning_content", "reasoning") if field == "both" else (field,)
    return dict.fromkeys(names, text)


def message(done: DoneEvent, field: ReasoningField) -> AssistantMessage:
    """A whole answer: content null when the model only called tools."""
    calls = [_tool_call(c) for c in done.tool_calls]
    thinking = _reasoning(done.reasoning, field)
    return AssistantMessage(content=done.text if done.text or not calls else None,
                            tool_calls=calls or None,
                            reasoning_content=thinking.get("reasoning_content"),
                            reasoning=thinking.get("reasoning"))


def _tool_call(call: ToolCall) -> ToolCallOut:
    return ToolCallOut(id=call.id or new_call_id(),
                       function=FunctionCall(name=call.name, arguments=call.arguments))


def message_json(msg: AssistantMessage) -> dict:
    """The message as OpenAI sends it: `content` always there (null or text), the other
    optional fields only when they have something."""
    return {"content": msg.content} | msg.model_dump(exclude_none=True)


class Deltas:
    """A streamed answer's events -> chat.completion.chunk deltas, one kind per delta: text,
    thinking, or a piece of one tool call, whose first delta carries its id, type and name
    (arguments "") and later ones only argument pieces."""

    def __init__(self, field: ReasoningField) -> None:
        self.field = field
        self._started: set[int] = set()

    def of(self, event: OutputEvent) -> list[dict]:
        if isinstance(event, TokenEvent):
            return [{"content": event.text}] if event.text else []
        if isinstance(event, ReasoningEvent):
            return [_reasoning(event.text, self.field)] if event.text else []
        return self._call(event)

    def _call(self, event: ToolCallEvent) -> list[dict]:
        out = []
        if event.index not in self._started:
            self._started.add(event.index)
            out.append({"index": event.index, "id": event.id or new_call_id(),
                        "type": "function",
                        "function": {"name": event.name, "arguments": ""}})
        if event.arguments:
            out.append({"index": event.index, "function": {"arguments": event.arguments}})
        return [{"tool_calls": [piece]} for piece in out]


# ---------------------------------------------------------------------------- logprobs
def _top(entry: TopLogprob) -> TopLogprobOut:
    return TopLogprobOut(token=entry.token, logprob=entry.logprob, bytes=list(entry.bytes))


def chat_logprobs(entries: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> list[dict]:
    """`logprobs.content` of a chat answer (or of one streamed chunk)."""
    return [TokenLogprobOut(token=e.token, logprob=e.logprob, bytes=list(e.bytes),
                            top_logprobs=[_top(t) for t in e.top]).model_dump()
            for e in entries]


def completion_logprobs(entries: tuple[TokenLogprob, ...] | list[TokenLogprob],
                        offset: int = 0) -> CompletionLogprobs:
    """The legacy form; `offset` is where the first token's text starts in the answer."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.token)
    return CompletionLogprobs(
        tokens=[e.token for e in entries], token_logprobs=[e.logprob for e in entries],
        top_logprobs=[_by_token(e.top) for e in entries], text_offset=offsets)


def _by_token(top: tuple[TopLogprob, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for t in top:  # most likely first: a later token with the same text is less likely
        out.setdefault(t.token, t.logprob)
    return out
