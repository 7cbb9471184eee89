"""The parser of every family whose calls are not one JSON object in tags: a block of calls
opened by a marker (`<tool_call>`, `<minimax:tool_call>`, `<｜tool▁calls▁begin｜>`,
`[TOOL_CALLS]`, ...) is held back whole until it ends, then read by the family's own
`parse` (XML parameters, a name before JSON, pythonic calls). What comes before and after
is answer text; thinking first, in the family's markers.

Holding the block back costs streaming of one call's arguments (they arrive whole, at the
block's end), and buys a parser per family that is a plain function of the block's text:
the same calls whichever way the output is cut, and a call the output cut off is never
reported (`cut_call`). A block the family cannot read is shown as the answer text it was,
never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from backends.base import Tool, ToolCallEvent
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.scan import (
    Sink,
    ThinkingFirstParser,
    find_marker,
    is_marker_start,
    new_call_id,
)


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: dict  # the call's arguments, typed (an XML value as its schema says)


# name -> the tool's JSON schema of its parameters (to type values written as text)
Schemas = Mapping[str, dict]
# the block's text (without its opener and closer) -> its calls, or None: not calls
BlockReader = Callable[[str, Schemas], "list[ParsedCall] | None"]
# the block's text so far -> where the block ends in it (just past its last character), or
# None while it may go on; `final`: the output ended
BlockEnd = Callable[[str, bool], "int | None"]


@dataclass(frozen=True)
class BlockSyntax:
    opens: tuple[str, ...]  # markers that start a block
    parse: BlockReader
    close: str | None = None  # the marker that ends a block
    end: BlockEnd | None = None  # where a block without a closer ends
    # or: makes that rule anew for each block, so it may keep what it has read (within a
    # block the text only grows) instead of reading the block from its start each time
    block_end: Callable[[], BlockEnd] | None = None
    # a block that may start only at the answer's start, with its opener part of the
    # block's text (Llama 4's pythonic `[name(...)]`)
    lead: bool = False
    # markers dropped wherever they stand outside a block, tools offered or not, and a lead
    # block's opener may follow them (Kimi K3's frame `<|open|>response<|sep|>`, Llama 4's
    # `<|python_start|>`/`<|python_end|>` around its calls, a stray closer of a block that
    # ends by its end rule)
    drop: tuple[str, ...] = ()
    # a block's opener ends thinking left open: the model calls without closing it first
    # (Kimi K2 Thinking does, llama.cpp notes)
    opens_end_thinking: bool = False

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.close, self.end, self.block_end)) != 1:
            raise ValueError("a block syntax has a close marker or an end rule, not both")


State = Literal["start", "think", "lead", "text", "block"]
# An end rule may read the whole block each time it is asked, so it is asked again only once
# a character that can end a block arrived, or this much more text (a long argument
# streamed token by token would otherwise cost its length squared).
ENDING = "])}>\n"
ASK_EVERY = 256


@dataclass
class BlockParser(ThinkingFirstParser):
    syntax: BlockSyntax | None  # None: no tools offered, only thinking is read
    thinking_markers: ThinkingMarkers | None
    thinking_open: bool = False
    schemas: Schemas = field(default_factory=dict)
    drop: tuple[str, ...] = ()  # the syntax's `drop`, kept when no tools are offered
    state: State = "text"
    buf: str = ""
    sink: Sink = field(default_factory=Sink)
    opener: str = ""  # of the block being read
    block_end: BlockEnd | None = None  # the end rule of the block being read
    calls: int = 0  # reported so far
    cut: bool = False
    asked: int = 0  # how much of the block its end rule saw without finding the end

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
        return self.cut

    # a call is reported once its block is whole, so a cut one was never reported (BaseJob
    # keeps the calls before it)
    reports_whole_calls = True

    def _answer_state(self) -> State:
        return "lead" if self.syntax is not None and self.syntax.lead else "text"

    def _think(self, final: bool) -> bool:
        assert self.thinking_markers is not None
        closer = self.thinking_markers.close
        ends: tuple[str, ...] = (closer,)
        if self.syntax is not None and self.syntax.opens_end_thinking:
            ends += self.syntax.opens
        hit = find_marker(self.buf, ends)
        if hit is not None:
            self.sink.put(self.buf[:hit[0]], thinking=True)
            self.buf, self.state = self.buf[hit[0] + len(hit[1]):], self._answer_state()
            self.sink.marker()
            if hit[1] != closer:  # a block opened with the thinking left open (Kimi K2)
                self._open_block(hit[1])
            return True
        self._put_safe(ends, thinking=True, final=final)
        return False

    def _lead(self, final: bool) -> bool:
        assert self.syntax is not None
        text = self.buf.lstrip()
        if not text and not final:
            return False
        dropped = next((d for d in self.drop if text.startswith(d)), None)
        if dropped is not None:
            self.buf = text[len(dropped):]
            self.sink.marker()
            return True
        opener = next((o for o in self.syntax.opens if text.startswith(o)), None)
        if opener is not None:
            self.buf = text
            self._open_block(opener)
            return True
        if is_marker_start(text, self.syntax.opens + self.drop) and not final:
            return False
        self.state = "text"
        return True

    def _text_markers(self) -> tuple[str, ...]:
        markers: tuple[str, ...] = ()
        if self.syntax is not None:
            if not self.syntax.lead:
                markers += self.syntax.opens
            if self.syntax.close:
                markers += (self.syntax.close,)
        if self.thinking_markers is not None:
            markers += (self.thinking_markers.open, self.thinking_markers.close)
        return markers + self.drop

    def _text(self, final: bool) -> bool:
        markers = self._text_markers()
        hit = find_marker(self.buf, markers)
        if hit is None:
            self._put_safe(markers, thinking=False, final=final)
            return False
        at, marker = hit
        self.sink.put(self.buf[:at], thinking=False)
        self.buf = self.buf[at + len(marker):]
        self.sink.marker()  # a stray closer or thinking marker is dropped
        if self.syntax is not None and marker in self.syntax.opens:
            self._open_block(marker)
        return True

    def _open_block(self, opener: str) -> None:
        assert self.syntax is not None
        self.opener, self.state, self.asked = opener, "block", 0
        make = self.syntax.block_end
        self.block_end = make() if make is not None else self.syntax.end

    def _block(self, final: bool) -> bool:
        syntax = self.syntax
        assert syntax is not None
        if syntax.close is not None:
            hit = find_marker(self.buf, (syntax.close,))
            if hit is None:
                if final:
                    self._cut_off()
                return False
            body, rest = self.buf[:hit[0]], self.buf[hit[0] + len(syntax.close):]
        else:
            assert self.block_end is not None
            new = self.buf[self.asked:]
            if not final and len(new) < ASK_EVERY and not any(c in new for c in ENDING):
                return False
            end = self.block_end(self.buf, final)
            if end is None:
                self.asked = len(self.buf)
                if final:
                    self._cut_off()
                return False
            body, rest = self.buf[:end], self.buf[end:]
        self._read_block(body)
        self.buf, self.state = rest, "text"
        self.sink.marker()
        return True

    def _read_block(self, body: str) -> None:
        assert self.syntax is not None
        try:
            calls = self.syntax.parse(body, self.schemas)
        except (ValueError, KeyError, TypeError, IndexError):
            calls = None
        if not calls:
            shown = body if self.syntax.lead else self.opener + body + (self.syntax.close or "")
            self.sink.put(shown, thinking=False)
            return
        for call in calls:
            self.sink.events.append(ToolCallEvent(self.calls, id=new_call_id(),
                                                  name=call.name))
            self.sink.events.append(ToolCallEvent(
                self.calls, arguments=json.dumps(call.arguments, ensure_ascii=False)))
            self.calls += 1

    def _cut_off(self) -> None:
        self.buf, self.cut, self.state = "", True, "text"


def schemas_of(tools: tuple[Tool, ...]) -> dict[str, dict]:
    return {t.name: t.parameters for t in tools}


def typed_value(text: str, schema: dict | None) -> object:
    """A parameter written as text (XML formats), as the JSON value its schema asks for:
    a string stays the text; a number, boolean, object or array is read as JSON (a value
    that is not valid JSON stays text, as llama.cpp and vLLM keep it)."""
    kinds = _types(schema)
    if not kinds or kinds == {"string"}:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if "string" in kinds and not _fits(value, kinds):
        return text  # ["string", "integer"] and "abc" is not a number: the text it was
    return value


def _fits(value: object, kinds: set[str]) -> bool:
    checks = {"integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
              "boolean": lambda v: isinstance(v, bool), "null": lambda v: v is None,
              "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list)}
    return any(check(value) for kind, check in checks.items() if kind in kinds)


def _types(schema: dict | None) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    found: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or ():
            found |= _types(branch)
    return found or ({"object"} if "properties" in schema else set())


def parameter_schema(schemas: Schemas, tool: str, name: str) -> dict | None:
    props = (schemas.get(tool) or {}).get("properties")
    if isinstance(props, dict):
        prop = props.get(name)
        return prop if isinstance(prop, dict) else None
    return None


def json_list_calls(text: str, schemas: Schemas, name_key: str = "name",
                    args_key: str = "arguments") -> list[ParsedCall] | None:
    """Calls written as one JSON list of objects naming an offered tool (Granite 3's
    `[{"name", "arguments"}]`, Command R7B's `[{"tool_name", "parameters"}]`); None when
    the text is no such list."""
    try:
        listed = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(listed, list):
        return None
    calls = []
    for item in listed:
        if not isinstance(item, dict):
            return None
        name, arguments = item.get(name_key), item.get(args_key, {})
        if not isinstance(name, str) or name not in schemas or not isinstance(arguments, dict):
            return None
        calls.append(ParsedCall(name, arguments))
    return calls or None
