"""A request inside a local backend's engine: who asked, where its text goes, and when its
tokens came. Each backend's `Job` (llama.cpp, MLX, cuda) extends `BaseJob` with its own
decoding state, and streams and ends a request the same way: `emitted` for each token's
bytes, `finish` for the text the stop-string holdback kept and a DoneEvent with the request's
Stats (backends.stats).
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
    TokenEvent,
)
from backends.stats import request_stats
from backends.text import TextStream


@dataclass
class BaseJob:
    stream_id: str
    request: GenerationRequest
    cancelled: CancelFlag | None
    _: KW_ONLY
    truncated: bool  # earlier turns (or the prompt's start) were dropped to fit the context
    text: TextStream
    started: float = field(default_factory=time.perf_counter)
    first_at: float | None = None  # when the first token came (perf_counter)
    last_at: float | None = None

    def is_cancelled(self) -> bool:
        return self.cancelled is not None and self.cancelled.is_set()

    def emitted(self, data: bytes) -> list[tuple[str, Event]]:
        """A token's bytes came now: the text that is safe to stream (a stop string is held
        back until it cannot be one)."""
        self.last_at = time.perf_counter()
        self.first_at = self.first_at or self.last_at
        piece = self.text.push(data)
        return [(self.stream_id, TokenEvent(piece))] if piece else []

    def finish(self, reason: FinishReason, *, prompt_tokens: int, completion_tokens: int,
               cached_tokens: int, draft_tokens: int = 0,
               accepted_tokens: int = 0) -> list[tuple[str, Event]]:
        """The request's last events: the text held back, then DoneEvent with its Stats."""
        events: list[tuple[str, Event]] = []
        rest = self.text.finish()
        if rest:
            events.append((self.stream_id, TokenEvent(rest)))
        stats = request_stats(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            started=self.started, first_at=self.first_at, last_at=self.last_at,
            end=time.perf_counter(), finish_reason=reason, truncated=self.truncated,
            cached_tokens=cached_tokens, draft_tokens=draft_tokens,
            accepted_tokens=accepted_tokens)
        events.append((self.stream_id, DoneEvent(stats, self.text.text)))
        return events
