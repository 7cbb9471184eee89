"""The parser of every format that marks its calls with tags around JSON (all but harmony):
optional thinking first (`<think>...</think>`), then answer text, in which an open marker
starts one call object or a list of them, read by `CallReader` (so a marker inside an
argument string is just text), up to an optional close marker.

  hermes   <tool_call>\\n{"name": .., "arguments": {..}}\\n</tool_call>    (a list also taken)
  generic  [TOOL_REQUEST]{"name": .., "arguments": {..}}[END_TOOL_REQUEST]
  phi4     <|tool_call|>[{"name": .., "arguments": {..}}, ..]<|/tool_call|>
  mistral  [TOOL_CALLS][{"name": .., "arguments": {..}, "id": ".."}, ..]
  llama3   {"name": .., "parameters": {..}} at the start of the answer (several: `;` or
           whitespace between), or after <|python_tag|>

Small models often skip their markers and answer with the bare call object, or one fenced in
```json (Qwen2.5-Coder-0.5B does, greedy, on "What's the weather in Paris?"); llama.cpp's
Hermes parser takes those too. A bare object at the answer's start is a call when its name is
one of the offered tools, and answer text otherwise (a JSON answer that happens to have a
"name" stays an answer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from backends.base import ToolCallEvent
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.json_call import CallReader
from backends.chat_format.scan import (
    Sink,
    ThinkingFirstParser,
    find_marker,
    is_marker_start,
    new_call_id,
)


@dataclass(frozen=True)
class CallSyntax:
    opens: tuple[str, ...]  # markers that start calls
    close: str | None = None  # the marker after them (None: the JSON's end is the end)
    bare_json: bool = False  # a bare (or ```json fenced) call object may start the answer


SYNTAX: dict[str, CallSyntax] = {
    "hermes": CallSyntax(("<tool_call>",), "</tool_call>", bare_json=True),
    "generic": CallSyntax(("[TOOL_REQUEST]",), "[END_TOOL_REQUEST]", bare_json=True),
    "phi4": CallSyntax(("<|tool_call|>",), "<|/tool_call|>"),
    "mistral": CallSyntax(("[TOOL_CALLS]",)),
    "llama3": CallSyntax(("<|python_tag|>",), bare_json=True),
}

# start: the thinking may open; think: inside it; lead: the answer's start, where a Llama 3
# call may be a bare object; text: answer; open: after a call marker, a list or an object
# follows; list: inside a list of calls; call: inside one call object; after: a call ended
State = Literal["start", "think", "lead", "text", "open", "list", "call", "after"]
FENCE = re.compile(r"```(?:json)?[ \t]*\n")


@dataclass
class TaggedParser(ThinkingFirstParser):
    syntax: CallSyntax | None  # None: no tools were offered, calls are not looked for
    thinking_markers: ThinkingMarkers | None
    thinking_open: bool = False
    tool_names: frozenset[str] | None = None  # what a bare call may name (None: any)
    state: State = "text"
    buf: str = ""
    sink: Sink = field(default_factory=Sink)
    index: int = -1  # of the call being read
    reader: CallReader | None = None
    announced: bool = False  # the current call's id and name went out
    in_list: bool = False  # the current call is an item of a list of calls
    bare: bool = False  # the current call came without a marker
    fenced: bool = False  # and inside a ```json fence

    def __post_init__(self) -> None:
        if self.thinking_markers is not None:
            self.state = "think" if self.thinking_open else "start"
        else:
            self.state = self._answer_state()

    @property
    def thinking(self) -> bool:
        return self.state == "think"

    @property
    def cut_call(self) -> bool:
        return (self.state == "call" and self.announced and self.reader is not None
                and not self.reader.done)

    # finish() drops the whitespace the output ended with: it may have been the start of a
    # marker's line, and a streamed answer never sent it either

    # -- one step of the state machine: True when it moved on ------------------------------
    def _answer_state(self) -> State:
        return "lead" if self.syntax is not None and self.syntax.bare_json else "text"

    def _text_markers(self) -> tuple[str, ...]:
        """Markers looked for in answer text: call openers, and stray closers and thinking
        markers (dropped, never shown)."""
        markers: tuple[str, ...] = ()
        if self.syntax is not None:
            markers += self.syntax.opens + ((self.syntax.close,) if self.syntax.close else ())
        if self.thinking_markers is not None:
            markers += (self.thinking_markers.open, self.thinking_markers.close)
        return markers

    def _think(self, final: bool) -> bool:
        assert self.thinking_markers is not None
        closer = self.thinking_markers.close
        hit = find_marker(self.buf, (closer,))
        if hit is not None:
            self.sink.put(self.buf[:hit[0]], thinking=True)
            self.buf, self.state = self.buf[hit[0] + len(closer):], self._answer_state()
            self.sink.marker()
            return True
        self._put_safe((closer,), thinking=True, final=final)
        return False

    def _lead(self, final: bool) -> bool:
        text = self.buf.lstrip()
        if not text:
            return False
        fence = FENCE.match(text)
        if fence is None and "```json\n".startswith(text[:8]) and "\n" not in text \
                and not final:
            return False  # may still become a fence
        body = text[fence.end():].lstrip() if fence else text
        if body[:1] == "{":
            rest = body[1:].lstrip()
            if rest.startswith('"name"'):
                self.buf = body
                self._begin_call()
                self.bare, self.fenced = True, fence is not None
                return True
            if '"name"'.startswith(rest) and not final:
                return False
        elif not body and not final:
            return False
        self.state = "text"
        return True

    def _text(self, final: bool) -> bool:
        markers = self._text_markers()
        hit = find_marker(self.buf, markers)
        if hit is None:
            self._put_safe(markers, thinking=False, final=final)
            return False
        at, marker = hit
        self.sink.put(self.buf[:at], thinking=False)
        self.buf = self.buf[at + len(marker):]
        self.sink.marker()
        if self.syntax is not None and marker in self.syntax.opens:
            self.state = "open"
        return True

    def _open(self, final: bool) -> bool:
        text = self.buf.lstrip()
        if not text:
            self.buf = ""
            return False
        if text[0] == "[":
            self.buf, self.state = text[1:], "list"
        elif text[0] == "{":
            self.buf = text
            self._begin_call(in_list=False)
        else:  # not a call after all: the text is answer (the marker stays dropped)
            self.state = "text"
        return True

    def _list(self, final: bool) -> bool:
        text = self.buf.lstrip(" \t\r\n,")
        if not text:
            self.buf = ""
            return False
        if text[0] == "{":
            self.buf = text
            self._begin_call(in_list=True)
        elif text[0] == "]":
            self.buf, self.state = text[1:], "after"
        else:
            self.buf, self.state = text, "text"
        return True

    def _call(self, final: bool) -> bool:
        assert self.reader is not None
        used = self.reader.advance(self.buf)
        self.buf = self.buf[used:]
        if self._not_a_call():
            return True
        self._report()
        if self.reader.bad:
            self._drop_call()
            self.state = "text"
            return True
        if not self.reader.done:
            return False
        if not self.announced:  # a whole object, but no call: nothing to report
            self._drop_call()
        self.state = "list" if self.in_list else "after"
        return True

    def _after(self, final: bool) -> bool:
        assert self.syntax is not None
        text, close = self.buf.lstrip(), self.syntax.close
        if not text:
            self.buf = ""
            return False
        if self.fenced and text.startswith("```"):
            self.buf, self.fenced = text[3:], False
            return True
        if self.fenced and "```".startswith(text) and not final:
            return False
        if close and text.startswith(close):
            self.buf = text[len(close):]
        elif close and is_marker_start(text, (close,)) and not final:
            self.buf = text
            return False
        elif self.syntax.bare_json and text[0] in ";{":
            self.buf, self.state = text.lstrip(";"), "lead"
            return True
        else:
            self.buf = text
        self.sink.marker()
        self.state = "text"
        return True

    # -- calls ------------------------------------------------------------------------------
    def _begin_call(self, in_list: bool = False) -> None:
        self.index += 1
        self.reader, self.announced, self.in_list = CallReader(), False, in_list
        self.bare = self.fenced = False
        self.state = "call"

    def _not_a_call(self) -> bool:
        """A bare object whose name is no offered tool is answer text after all."""
        reader = self.reader
        assert reader is not None
        if not self.bare or self.announced or reader.name is None or self.tool_names is None \
                or reader.name in self.tool_names:
            return False
        self.buf = reader.text + self.buf
        self.index -= 1
        self.bare = self.fenced = False
        self.state = "text"
        return True

    def _drop_call(self) -> None:
        if not self.announced:
            self.index -= 1

    def _report(self) -> None:
        reader = self.reader
        assert reader is not None
        if not self.announced and reader.name is not None:
            self.sink.events.append(ToolCallEvent(self.index, id=new_call_id(),
                                                  name=reader.name))
            self.announced = True
        if self.announced:
            piece = reader.take_arguments()
            if piece:
                self.sink.events.append(ToolCallEvent(self.index, arguments=piece))
