"""GLM-4.5/4.6 and GLM-4.7: the name right after the marker, then key and value tags, one
block per call (4.6 puts a newline after the name and each tag, 4.7 none):

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

A value is raw text (a string parameter as it is, any other as JSON). It thinks in
`<think>` (GLM-4.7's prompt opens it). The templates name `<tool_call>` and `<arg_key>`;
Spark 2.5, Ling 3.0 and Poolside's Laguna write the same shape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.block import (
    BlockSyntax,
    ParsedCall,
    Schemas,
    parameter_schema,
    typed_value,
)
from backends.chat_format.call_grammar import CallGrammar, Markers, lit
from backends.chat_format.families.base import Family, mentions
from backends.chat_format.xml_calls import Values, call_rules, closer_after, inside, text_value

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
NAME = re.compile(r"\s*([^\s<>]{1,200})")
KEY = re.compile(r"\s*<arg_key>([^<]{1,200})</arg_key>\s*<arg_value>")
VALUE = Values(VALUE_CLOSE, (KEY_OPEN, ""))


def matches(template: str) -> bool:
    return mentions(template, OPEN, KEY_OPEN)


def end(text: str, final: bool) -> int | None:
    """The block ends at `</tool_call>` right after a value's closer, or at the first one
    where no argument has started (a call without arguments)."""
    first = text.find(CLOSE)
    if first >= 0 and text.find(KEY_OPEN, 0, first) < 0:
        return first + len(CLOSE)
    return closer_after(text, CLOSE, VALUE_CLOSE)


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    text = inside(block, CLOSE)
    head = NAME.match(text) if text is not None else None
    if text is None or head is None:
        return None
    name, at = head[1], head.end()
    arguments: dict = {}
    while (key := KEY.match(text, at)) is not None:
        read = VALUE.read(text, key.end())
        if read is None:
            return None
        value, at = read
        arguments[key[1].strip()] = typed_value(value, parameter_schema(schemas, name,
                                                                        key[1].strip()))
    return [ParsedCall(name, arguments)] if not text[at:].strip() else None


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    """The newlines between tags are the model's to write or not (4.6 does, 4.7 does not);
    the tags are GLM's special tokens where the vocabulary has them."""

    def param(key: str, value: str | None) -> str:
        head = f'"\\n"? {m(KEY_OPEN)} {lit(key)} {m(KEY_CLOSE)} "\\n"? {m(VALUE_OPEN)}'
        return f"{head} gvalue" if value is None else f"{head} {value} {m(VALUE_CLOSE)}"

    rules = call_rules(tools, lambda t, params: f"{lit(t.name)} {params}", param)
    rules += text_value("gvalue", VALUE_CLOSE, m)
    open_, close = m(OPEN), m(CLOSE)
    many = ' ("\\n"? block)*' if parallel and tools else ""  # GLM-4.7: none between
    rules.append(f'rest: fn "\\n"? {close}{many}')
    rules.append(f'block: {open_} fn "\\n"? {close}')
    rules.append(f"calls: {open_} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="glm",
    matches=matches,
    call_markers=(OPEN, CLOSE, KEY_OPEN, KEY_CLOSE, VALUE_OPEN, VALUE_CLOSE),
    blocks=BlockSyntax((OPEN,), parse, end=end),
    grammar=grammar,
)
