"""A request inside a local backend's engine: who asked, where its text goes, and when its
tokens came. Each backend's `Job` (llama.cpp, MLX, cuda) extends `BaseJob` with its own
decoding state, and streams and ends a request the same way: `emitted` for each token's
bytes, `finish` for the text the stop-string holdback kept and a DoneEvent with the request's
Stats (backends.stats).

The text goes through the request's output parser (backends.chat_format), which splits it
into answer, thinking and tool calls; the DoneEvent is the sum of exactly the events that
were streamed (`Answer`), so a streamed answer and a whole one cannot differ.
"""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass, field

from backends.base import (
    CancelFlag,
    DoneEvent,
    Event,
    FinishReason,
    GenerationRequest,
    LogprobEvent,
    OutputEvent,
    ReasoningEvent,
    TokenEvent,
    TokenLogprob,
    ToolCall,
    ToolCallEvent,
)
from backends.chat_format.base import OutputParser
from backends.chat_format.parsers import PlainParser
from backends.stats import request_stats
from backends.text import TextStream


@dataclass
class Answer:
    """What a request's events add up to."""
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[list[str]] = field(default_factory=list)  # id, name, arguments per index

    def add(self, event: OutputEvent) -> None:
        if isinstance(event, TokenEvent):
            self.content.append(event.text)
        elif isinstance(event, ReasoningEvent):
            self.reasoning.append(event.text)
        elif isinstance(event, ToolCallEvent):
            while len(self.calls) <= event.index:
                self.calls.append(["", "", ""])
            call = self.calls[event.index]
            call[0] = call[0] or event.id
            call[1] = call[1] or event.name
            call[2] += event.arguments

    def tool_calls(self, drop_last: bool) -> tuple[ToolCall, ...]:
        calls = self.calls[:-1] if drop_last else self.calls
        return tuple(ToolCall(id=c[0], name=c[1], arguments=c[2] or "{}") for c in calls)


@dataclass
class BaseJob:
    stream_id: str
    request: GenerationRequest
    cancelled: CancelFlag | None
    _: KW_ONLY
    truncated: bool  # earlier turns (or the prompt's start) were dropped to fit the context
    text: TextStream
    output: OutputParser = field(default_factory=PlainParser)
    started: float = field(default_factory=time.perf_counter)
    first_at: float | None = None  # when the first token came (perf_counter)
    last_at: float | None = None
    reasoning_tokens: int = 0
    answer: Answer = field(default_factory=Answer)
    speculation_off: str = ""  # why speculative decoding was switched off, if it was
    logprobs: list[TokenLogprob] = field(default_factory=list)  # if the request asked

    def is_cancelled(self) -> bool:
        return self.cancelled is not None and self.cancelled.is_set()

    def emitted(self, data: bytes,
                logprob: TokenLogprob | None = None) -> list[tuple[str, Event]]:
        """A token's bytes came now: the events that are safe to stream (a stop string is held
        back until it cannot be one, a marker until the parser knows what it is), after the
        token's log-probability if the request asked for it."""
        self.last_at = time.perf_counter()
        self.first_at = self.first_at or self.last_at
        if self.output.thinking:
            self.reasoning_tokens += 1
        events = self._parsed(self.output.feed(self.text.push(data)))
        if logprob is None:
            return events
        self.logprobs.append(logprob)
        return [(self.stream_id, LogprobEvent(logprob)), *events]

    def _parsed(self, events: list[OutputEvent]) -> list[tuple[str, Event]]:
        for event in events:
            self.answer.add(event)
        return [(self.stream_id, event) for event in events]

    def finish(self, reason: FinishReason, *, prompt_tokens: int, completion_tokens: int,
               cached_tokens: int, draft_tokens: int = 0,
               accepted_tokens: int = 0, media_tokens: int = 0,
               disk_tokens: int = 0) -> list[tuple[str, Event]]:
        """The request's last events: the text held back, then DoneEvent with its Stats.
        An answer that ended by calling tools finishes with "tool_calls"; a call cut off by
        max_tokens is left out (the reason stays "length")."""
        events = self._parsed(self.output.feed(self.text.finish()) + self.output.finish())
        cut = self.output.cut_call
        # a parser that reports calls only whole (backends.chat_format.block) never
        # reported the one cut off: the last call it reported is whole
        whole_only = getattr(self.output, "reports_whole_calls", False)
        calls = self.answer.tool_calls(drop_last=cut and not whole_only)
        if reason == "stop" and calls and not cut:
            reason = "tool_calls"
        stats = request_stats(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            started=self.started, first_at=self.first_at, last_at=self.last_at,
            end=time.perf_counter(), finish_reason=reason, truncated=self.truncated,
            cached_tokens=cached_tokens, draft_tokens=draft_tokens,
            accepted_tokens=accepted_tokens, reasoning_tokens=self.reasoning_tokens,
            speculation_off=self.speculation_off, stop_sequence=self.text.matched,
            media_tokens=media_tokens, disk_tokens=disk_tokens)
        events.append((self.stream_id, DoneEvent(
            stats, "".join(self.answer.content), reasoning="".join(self.answer.reasoning),
            tool_calls=calls, logprobs=tuple(self.logprobs))))
        return events
