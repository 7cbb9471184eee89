"""Where JSON values end in a block of calls, read as the block's text grows: the end rules
(backends.chat_format.block, `BlockSyntax.block_end`) of formats that write each call's
arguments as a JSON object after a marker (DeepSeek, Kimi K2, Mistral's `[ARGS]`).

A marker inside an argument's string is text: `JsonScan` knows where strings, escapes and
nesting are, so only a marker outside every value ends a call or the block. The scan never
recurses and reads each character once, however the output is cut, so a huge or deeply
nested value costs its length and no more.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from backends.chat_format.scan import find_marker, safe_length

_IN_STRING = re.compile(r'[^"\\]+')  # a run of a string's plain characters
_OUTSIDE = re.compile(r'[^"{}\[\]]+')  # a run between strings and brackets
_WHITESPACE = " \t\r\n"


@dataclass
class JsonScan:
    """One JSON object or array, read from `pos` on as text arrives."""
    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    started: bool = False
    done: bool = False  # the value ended, at `advance`'s answer
    bad: bool = False  # what follows is no JSON object or array

    def advance(self, text: str, pos: int) -> int:
        """Read `text` from `pos`; returns where the reading stopped (just past the value's
        end once `done`, at the offending character once `bad`)."""
        n = len(text)
        while pos < n and not self.started:
            ch = text[pos]
            if ch in _WHITESPACE:
                pos += 1
                continue
            if ch not in "{[":
                self.bad = True
                return pos
            self.started = True
        while pos < n:
            if self.in_string:
                if self.escaped:
                    self.escaped, pos = False, pos + 1
                    continue
                run = _IN_STRING.match(text, pos)
                if run is not None:
                    pos = run.end()
                    continue
                self.escaped = text[pos] == "\\"
                self.in_string = text[pos] != '"'
                pos += 1
                continue
            run = _OUTSIDE.match(text, pos)
            if run is not None:
                pos = run.end()
                continue
            ch = text[pos]
            pos += 1
            if ch == '"':
                self.in_string = True
            elif ch in "{[":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return pos
        return pos


class JsonCallsEnd:
    """The end rule of a block whose calls' arguments are JSON values, each after one of
    `starts`: the block ends just past `close` written outside every value (None: just past
    its first value). At the output's end, a block not ended is a call cut off (None)."""

    def __init__(self, starts: tuple[str, ...], close: str | None) -> None:
        self.starts, self.close = starts, close
        self.markers = starts + ((close,) if close else ())
        self.pos = 0
        self.value: JsonScan | None = None

    def __call__(self, text: str, final: bool) -> int | None:
        while True:
            if self.value is not None:
                self.pos = self.value.advance(text, self.pos)
                if self.value.done:
                    self.value = None
                    if self.close is None:
                        return self.pos
                    continue
                if not self.value.bad:
                    return None
                self.value = None  # not a value after all: look for markers again
            hit = find_marker(text[self.pos:], self.markers)
            if hit is None:
                self.pos += safe_length(text[self.pos:], self.markers)
                return None
            at, marker = self.pos + hit[0], hit[1]
            self.pos = at + len(marker)
            if marker == self.close:
                return self.pos
            self.value = JsonScan()


def json_object(text: str) -> dict | None:
    """`text` (and only it, but for whitespace) as a JSON object, or None."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
