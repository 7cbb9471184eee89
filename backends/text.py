"""Turning sampled tokens into streamed text: UTF-8 safe, stop strings held back."""

from __future__ import annotations

import codecs


class TextStream:
    """Accumulates decoded bytes; `push` returns the text that is safe to send now.
    `matched` is the stop string that ended the text, if one did."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self.emitted = 0
        self.stopped = False
        self.matched: str | None = None

    def push(self, data: bytes) -> str:
        self.text += self._decoder.decode(data)
        hit = find_stop(self.text, self.stops, self.emitted)
        if hit is not None:
            self.text = self.text[:hit[0]]
            self.stopped, self.matched = True, hit[1]
            return self._flush()
        safe = len(self.text) - held_back(self.text, self.stops)
        if safe <= self.emitted:
            return ""
        out = self.text[self.emitted:safe]
        self.emitted = safe
        return out

    def finish(self) -> str:
        if not self.stopped:
            self.text += self._decoder.decode(b"", final=True)
        return self._flush()

    def _flush(self) -> str:
        out = self.text[self.emitted:]
        self.emitted = len(self.text)
        return out


def find_stop(text: str, stops: tuple[str, ...], emitted: int) -> tuple[int, str] | None:
    """Index of the earliest stop string in `text`, and that string (the first one given
    among those found there); only the unsent tail can hold a new one."""
    if not stops:
        return None
    window = max(0, emitted - max(len(s) for s in stops))
    hits = [(i, n, s) for n, s in enumerate(stops) if (i := text.find(s, window)) >= 0]
    if not hits:
        return None
    index, _, stop = min(hits)
    return index, stop


def held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing characters could be the start of a stop string (not sent yet)."""
    longest = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                longest = max(longest, n)
                break
    return longest
