"""Reading one tool call's JSON as it streams in, character by character: where its strings,
escapes and nesting are, so a marker or a brace inside a string value never ends it.

`CallReader` reads a call object, `{"name": "f", "arguments": {...}}` (Llama 3 says
"parameters"; Mistral adds "id"), and gives the name once it is whole and the arguments' text
as it comes. `ValueReader` reads a bare JSON value (harmony's arguments, which follow the name
in the header)."""

from __future__ import annotations

import json
from dataclasses import dataclass

ARGUMENT_KEYS = ("arguments", "parameters")
WHITESPACE = " \t\r\n"


@dataclass
class ValueReader:
    """One JSON value's extent, as text arrives: `done` once it is whole."""
    text: str = ""
    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    started: bool = False
    done: bool = False
    bad: bool = False  # not JSON from its first character

    def advance(self, text: str) -> int:
        """Read from `text` until the value ends; returns how many characters were its."""
        for i, ch in enumerate(text):
            if not self.started:
                if ch in WHITESPACE:
                    continue
                if ch not in "{[":
                    self.bad = True
                    return i
                self.started = True
            self.text += ch
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == '"':
                    self.in_string = False
            elif ch == '"':
                self.in_string = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return i + 1
        return len(text)


@dataclass
class CallReader:
    """One call object; `advance` reads characters of it and says how many were its."""
    text: str = ""  # the object so far
    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    expect: str = "open"  # open, key, colon, value, comma (the grammar of the top object)
    key: str = ""
    key_start: int = -1
    value_key: str = ""  # the key whose value is being read
    value_start: int = -1
    value_end: int = -1  # set when that value is whole
    name: str | None = None
    args_start: int = -1  # where the arguments' text starts in `text`
    args_end: int = -1  # and ends (-1 while it grows)
    args_string: bool = False  # "arguments": "{...}" (a JSON object in a JSON string)
    args_given: int = 0  # how much of the arguments `take_arguments` has given out
    done: bool = False
    bad: bool = False  # not a call object

    def advance(self, text: str) -> int:
        for i, ch in enumerate(text):
            if self.expect == "open":
                if ch in WHITESPACE:
                    continue
                if ch != "{":
                    self.bad = True
                    return i
            self.text += ch
            self._read(ch, len(self.text) - 1)
            if self.done:
                return i + 1
        return len(text)

    # the object's text is kept whole so the name and the arguments can be cut out of it
    def _read(self, ch: str, at: int) -> None:
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif ch == "\\":
                self.escaped = True
            elif ch == '"':
                self.in_string = False
                if self.depth == 1:
                    self._string_closed(at)
            return
        if ch == '"':
            self.in_string = True
            if self.depth == 1:
                if self.expect == "key":
                    self.key_start = at
                elif self.expect == "value":
                    self._value_starts(at)
            return
        if ch in "{[":
            if self.depth == 1 and self.expect == "value":
                self._value_starts(at)
            self.depth += 1
            if self.depth == 1:
                self.expect = "key"
            return
        if ch in "}]":
            self.depth -= 1
            if self.depth == 1:
                self._value_ends(at + 1)
            elif self.depth == 0:
                if self.value_start >= 0:  # a bare value (number, true, null) ends here
                    self._value_ends(at)
                self.done = True
            return
        if self.depth != 1 or ch in WHITESPACE:
            return
        if ch == ":":
            self.expect = "value"
        elif ch == ",":
            if self.value_start >= 0:
                self._value_ends(at)
            self.expect = "key"
        elif self.expect == "value":
            self._value_starts(at)

    def _string_closed(self, at: int) -> None:
        if self.expect == "key":
            key = _loads(self.text_at(self.key_start, at + 1))
            self.key = key if isinstance(key, str) else ""
            self.expect = "colon"
        elif self.value_start >= 0:
            self._value_ends(at + 1)

    def _value_starts(self, at: int) -> None:
        self.value_key, self.value_start, self.expect = self.key, at, "comma"
        if self.value_key in ARGUMENT_KEYS and self.args_start < 0:
            self.args_start = at

    def _value_ends(self, end: int) -> None:
        if self.value_start < 0:
            return
        value = self.text_at(self.value_start, end).strip()
        if self.value_key == "name" and self.name is None:
            name = _loads(value)
            self.name = name if isinstance(name, str) and name else None
        elif self.value_key in ARGUMENT_KEYS and self.args_start == self.value_start:
            self.args_end = self.value_start + len(value)
            self.args_string = value.startswith('"')
        self.value_start = -1

    def text_at(self, start: int, end: int) -> str:
        return self.text[start:end]

    def take_arguments(self) -> str:
        """The arguments' text that came since the last call (given only once the name is
        known; a string holding JSON is given whole, as that JSON)."""
        if self.name is None or self.args_start < 0:
            return ""
        if self.args_string or self._args_is_string():
            if self.args_end < 0 or self.args_given:
                return ""
            self.args_given = 1
            inner = _loads(self.text[self.args_start:self.args_end])
            return inner if isinstance(inner, str) else ""
        end = self.args_end if self.args_end >= 0 else len(self.text)
        start = self.args_start + self.args_given
        if end <= start:
            return ""
        piece = self.text[start:end]
        if self.args_end < 0:  # not whole yet: trailing whitespace may be the end of it
            piece = piece.rstrip(WHITESPACE)
        self.args_given += len(piece)
        return piece

    def _args_is_string(self) -> bool:
        return self.text[self.args_start:self.args_start + 1] == '"'


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None
