"""What every output parser does with text: find the next marker, hold back a tail that may
still grow into one, and send text to the answer or the thinking with the whitespace that
touches a marker dropped (it belongs to the marker: `</think>\\n\\n`, `\\n<tool_call>`)."""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from dataclasses import dataclass, field

from backends.base import OutputEvent, ReasoningEvent, TokenEvent
from backends.chat_format.base import ThinkingMarkers

_ALPHANUMERIC = string.ascii_letters + string.digits
_random = random.SystemRandom()


def new_call_id() -> str:
    """OpenAI's shape: `call_` and 24 random letters and digits."""
    return "call_" + "".join(_random.choice(_ALPHANUMERIC) for _ in range(24))


def find_marker(text: str, markers: Sequence[str]) -> tuple[int, str] | None:
    """The first marker in `text` and where it starts (the longest one at a tie)."""
    best: tuple[int, str] | None = None
    for marker in markers:
        at = text.find(marker)
        if at >= 0 and (best is None or at < best[0]
                        or (at == best[0] and len(marker) > len(best[1]))):
            best = (at, marker)
    return best


def safe_length(text: str, markers: Sequence[str]) -> int:
    """How much of `text` (which holds no whole marker) cannot be part of a marker: the rest
    is the start of one, and waits for the next piece."""
    hold = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), hold, -1):
            if text.endswith(marker[:k]):
                hold = k
                break
    return len(text) - hold


def is_marker_start(text: str, markers: Sequence[str]) -> bool:
    """`text` is a marker cut short (a piece of output that may still become one)."""
    return any(m.startswith(text) and m != text for m in markers)


@dataclass
class Sink:
    """Text on its way out as answer (TokenEvent) or thinking (ReasoningEvent). Whitespace
    at the end of a run is held until more text follows; `marker()` drops it, and the
    whitespace right after the marker too."""
    events: list[OutputEvent] = field(default_factory=list)
    held: str = ""  # trailing whitespace of the last text put
    trim_start: bool = True  # drop leading whitespace (right after a marker, or at the start)

    def put(self, text: str, *, thinking: bool) -> None:
        if self.trim_start:
            text = text.lstrip()
            if not text:
                return
            self.trim_start = False
        body = text.rstrip()
        if body:
            piece = self.held + body
            self.events.append(ReasoningEvent(piece) if thinking else TokenEvent(piece))
            self.held = ""
        self.held += text[len(body):]

    def marker(self) -> None:
        self.held = ""
        self.trim_start = True

    def take(self) -> list[OutputEvent]:
        events, self.events = self.events, []
        return events


class SteppedParser:
    """`feed` and `finish` of a parser that is a state machine over its buffered text: a
    subclass's `_step(final)` consumes what it can and says whether to step again, and
    `_ended()` adds what the output's end means (text that never reached a marker)."""
    buf: str
    sink: Sink

    def _step(self, final: bool) -> bool:
        raise NotImplementedError

    def _ended(self) -> None:
        pass

    def feed(self, text: str) -> list[OutputEvent]:
        self.buf += text
        while self._step(final=False):
            pass
        return self.sink.take()

    def finish(self) -> list[OutputEvent]:
        while self._step(final=True):
            pass
        self._ended()
        return self.sink.take()

    def _put_safe(self, markers: tuple[str, ...], *, thinking: bool, final: bool) -> None:
        """Send what cannot be a marker; at the end, a marker cut short is dropped."""
        n = safe_length(self.buf, markers)
        self.sink.put(self.buf[:n], thinking=thinking)
        self.buf = "" if final else self.buf[n:]


class ThinkingFirstParser(SteppedParser):
    """A stepped parser whose output may open with thinking in marked text: its `start`
    state waits for the opening marker (or text that cannot become it), then goes to the
    thinking or to the subclass's `_answer_state()`."""
    thinking_markers: ThinkingMarkers | None
    state: str

    def _answer_state(self) -> str:
        raise NotImplementedError

    def _step(self, final: bool) -> bool:
        return bool(getattr(self, f"_{self.state}")(final))

    def _start(self, final: bool) -> bool:
        assert self.thinking_markers is not None
        opener, text = self.thinking_markers.open, self.buf.lstrip()
        if text.startswith(opener):
            self.buf, self.state = text[len(opener):], "think"
            self.sink.marker()
            return True
        if (not text or is_marker_start(text, (opener,))) and not final:
            return False
        self.state = self._answer_state()
        return True
