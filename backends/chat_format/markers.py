"""Marker tokens shown as text, and known for tokens. Backends detokenize with special
tokens hidden, so that `<|im_end|>` and its kind never reach the answer; but a format's
markers can be control tokens too (harmony's `<|channel|>`, Llama's `<|python_tag|>`,
Mistral's `[TOOL_CALLS]`), and the output parser must see those.

Where the backend has token ids, a marker counts only as its token: a model that writes
the text `<|call|>` (in its reasoning, or an argument) has not called anything. Each backend
asks for `marker_pieces` at load: a marker token detokenizes to its text between two
private-use characters, which `TokenMarkedParser` (every parser of that model is wrapped
in one) reads as the marker; the same text written any other way is broken up before the
family's parser sees it, and the output is given back clean. The remote backend has only
text, so there every marker text counts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from backends.base import OutputEvent, ReasoningEvent, TokenEvent, ToolCallEvent
from backends.chat_format.base import OutputParser
from backends.chat_format.scan import safe_length

TOKEN_START, TOKEN_END = "\ue000", "\ue001"  # around a marker that came as its token
BREAK = "\ue002"  # put inside a marker's text that did not come as the token
PRIVATE = str.maketrans("", "", TOKEN_START + TOKEN_END + BREAK)


def marker_pieces(markers: Sequence[str],
                  tokenize: Callable[[str], list[int]]) -> dict[int, bytes]:
    """Token id -> what it detokenizes to, for each marker that is a single token of the
    vocabulary (`tokenize` must read special-token text as those tokens)."""
    pieces: dict[int, bytes] = {}
    for marker in markers:
        ids = tokenize(marker)
        if len(ids) == 1:
            pieces[ids[0]] = (TOKEN_START + marker + TOKEN_END).encode("utf-8")
    return pieces


def token_markers(pieces: dict[int, bytes]) -> tuple[str, ...]:
    """The markers `marker_pieces` found as tokens."""
    return tuple(p.decode("utf-8")[1:-1] for p in pieces.values())


@dataclass
class TokenMarkedParser:
    """A family's parser fed from tokens: it sees a marker only where its token came."""
    inner: OutputParser
    markers: tuple[str, ...]  # the markers that are tokens of this vocabulary
    buf: str = ""
    _longest_first: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self._longest_first = tuple(sorted(self.markers, key=len, reverse=True))

    @property
    def thinking(self) -> bool:
        return self.inner.thinking

    @property
    def cut_call(self) -> bool:
        return self.inner.cut_call

    @property
    def reports_whole_calls(self) -> bool:  # see BaseJob.finish
        return getattr(self.inner, "reports_whole_calls", False)

    def feed(self, text: str) -> list[OutputEvent]:
        self.buf += text
        return clean(self.inner.feed(self._take(final=False)))

    def finish(self) -> list[OutputEvent]:
        text = self._take(final=True)
        return clean(self.inner.feed(text) + self.inner.finish())

    def _take(self, final: bool) -> str:
        out: list[str] = []
        while (at := self.buf.find(TOKEN_START)) >= 0:
            end = self.buf.find(TOKEN_END, at)
            if end < 0:
                break  # a token's piece comes whole; this is text with the character in it
            out.append(self._broken(self.buf[:at]))
            out.append(self.buf[at + 1:end])
            self.buf = self.buf[end + 1:]
        keep = len(self.buf) if final else safe_length(self.buf, self.markers)
        out.append(self._broken(self.buf[:keep]))
        self.buf = self.buf[keep:]
        return "".join(out)

    def _broken(self, text: str) -> str:
        for marker in self._longest_first:
            if marker in text:
                text = text.replace(marker, marker[0] + BREAK + marker[1:])
        return text


def clean(events: list[OutputEvent]) -> list[OutputEvent]:
    """The events without the private characters the marking put in."""
    out: list[OutputEvent] = []
    for e in events:
        if isinstance(e, TokenEvent | ReasoningEvent):
            text = e.text.translate(PRIVATE)
            if text:
                out.append(replace(e, text=text))
        elif isinstance(e, ToolCallEvent):
            out.append(replace(e, name=e.name.translate(PRIVATE) if e.name else e.name,
                               arguments=e.arguments.translate(PRIVATE) if e.arguments
                               else e.arguments))
        else:
            out.append(e)
    return out
