"""What the families that write a call's arguments as tags share (Qwen3-Coder's
`<parameter=K>`, Seed-OSS, GLM's `<arg_key>`/`<arg_value>`, MiniMax-M2's and DeepSeek DSML's
`<parameter name="K">`): one tag per parameter, its value the raw text up to the closing tag
(a string parameter is that text, any other is JSON: backends.chat_format.block.typed_value).

A value may hold anything, the block's own markers included, so a closing tag counts only
where the markup goes on after it: a value ends at the first closer followed (whitespace
aside) by the next tag, and a block at the first closer of the block right after the
closer of a call. The grammar writes the same tags, a string value as text up to its closer
and any other as JSON of its schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from backends.base import Tool
from backends.chat_format.block import (
    BlockEnd,
    ParsedCall,
    Schemas,
    _types,
    parameter_schema,
    typed_value,
)
from backends.chat_format.call_grammar import TOOL_JSON, Markers, json_rule, lit, regex_text

GAP = 1000  # the most whitespace between a call's closer and its block's


def closer_after(text: str, closer: str, before: str) -> int | None:
    """Where the first `closer` that comes right after `before` (whitespace aside) ends.
    Plain searches, no regex over the whole text: the parser asks again at every piece."""
    at = text.find(closer)
    while at >= 0:
        if text[max(0, at - GAP):at].rstrip().endswith(before):
            return at + len(closer)
        at = text.find(closer, at + 1)
    return None


def ends_after(call_closer: str, *block_closers: str) -> BlockEnd:
    """A block ends at its closer right after a call's closer (`</function>` then
    `</tool_call>`): a value that holds `</tool_call>` does not end it."""

    def end(text: str, final: bool) -> int | None:
        ends = [e for c in block_closers if (e := closer_after(text, c, call_closer)) is not None]
        return min(ends) if ends else None

    return end


class Values:
    """Reads a tag's value: the text from `start` up to the first `closer` that the next
    tag (one of `nexts`) follows, whitespace aside; the end of the text counts as a next tag
    when `nexts` holds ""."""

    def __init__(self, closer: str, nexts: Sequence[str]) -> None:
        ahead = [re.escape(n) for n in nexts if n]
        if "" in nexts:
            ahead.append(r"\Z")
        self.closer = closer
        self.pattern = re.compile(re.escape(closer) + r"(?=\s*(?:" + "|".join(ahead) + "))")

    def read(self, text: str, start: int) -> tuple[str, int] | None:
        """(the value, where the text goes on after its closer), or None: no closer."""
        found = self.pattern.search(text, start)
        if found is None:
            return None
        return text[start:found.start()], found.end()


def one_newline_off(value: str) -> str:
    """A value as Qwen3-Coder writes it, `\\nVALUE\\n`: one newline off each end."""
    if value.startswith("\n"):
        value = value[1:]
    return value[:-1] if value.endswith("\n") else value


# a value's text, its parameter's tag, its schema -> the value
ValueReader = Callable[[str, "re.Match[str]", "dict | None"], object]


def schema_typed(text: str, tag: re.Match[str], schema: dict | None) -> object:
    return typed_value(text, schema)


@dataclass(frozen=True)
class CallTags:
    """Calls written `HEAD PARAM VALUE .. END` one after another (whitespace between):
    `head` and `param` match a call's and a parameter's opening tag (group 1: the name),
    `end` a call's closing tag."""
    head: re.Pattern[str]
    param: re.Pattern[str]
    value: Values
    end: re.Pattern[str]
    trim: bool = False  # a value's newline each side is markup (Qwen3-Coder)
    read_value: ValueReader = schema_typed

    def read(self, text: str, schemas: Schemas) -> list[ParsedCall] | None:
        """The calls that are all of `text` (whitespace aside), or None."""
        calls: list[ParsedCall] = []
        at = 0
        while (head := self.head.match(text, at)) is not None:
            name, at = head[1].strip(), head.end()
            arguments: dict = {}
            while (tag := self.param.match(text, at)) is not None:
                read = self.value.read(text, tag.end())
                if read is None:
                    return None
                value, at = read
                key = tag[1].strip()
                value = one_newline_off(value) if self.trim else value
                arguments[key] = self.read_value(value, tag,
                                                 parameter_schema(schemas, name, key))
            end = self.end.match(text, at)
            if end is None or not name:
                return None
            at = end.end()
            calls.append(ParsedCall(name, arguments))
        return calls if calls and not text[at:].strip() else None


def inside(block: str, closer: str) -> str | None:
    """A block's text without its closer (None: it does not end with it)."""
    body = block.rstrip()
    return body[:-len(closer)] if body.endswith(closer) else None


# ------------------------------------------------------------------------------ grammar
# the parameter's key, its value's rule (None: a string, the family's text rule) -> its text
ParamRule = Callable[[str, "str | None"], str]


def value_rule(schema: object) -> str | None:
    """A parameter's value as the parser reads it back: None for text (a string, or a
    value that may be one), the enum's literals for an enum of strings without a type, or
    JSON of its schema."""
    if not isinstance(schema, dict):
        return None
    kinds = _types(schema)
    enum = schema.get("enum")
    if (not kinds or kinds == {"string"}) and isinstance(enum, list) and enum \
            and all(isinstance(e, str) for e in enum):
        return "(" + " | ".join(lit(e) for e in enum) + ")"
    if not kinds or "string" in kinds:
        return None
    return json_rule(schema, TOOL_JSON)


def tool_params(tool: Tool, param: ParamRule) -> str:
    """A tool's parameters in its schema's order, the required ones always, the others
    maybe (empty: a tool without parameters)."""
    props = tool.parameters.get("properties")
    if not isinstance(props, dict):
        return '""'
    required = tool.parameters.get("required") or ()
    parts = []
    for key, schema in props.items():
        rule = param(str(key), value_rule(schema))
        parts.append(rule if key in required else f"({rule})?")
    return " ".join(parts) or '""'


def call_rules(tools: Sequence[Tool], call: Callable[[Tool, str], str],
               param: ParamRule) -> list[str]:
    """`fn`: one call of any of `tools`, `call(tool, its parameters' rule)` each."""
    rules = [f"fn_{i}: " + call(tool, tool_params(tool, param)) for i, tool in enumerate(tools)]
    rules.append("fn: " + " | ".join(f"fn_{i}" for i in range(len(tools))))
    return rules


def text_until(name: str, closer: str) -> str:
    """A lazy lexeme: text up to and with the first `closer` (a string value and its
    closing tag)."""
    pattern = regex_text(closer).replace("\\\n", "\\n")  # a newline as `\n`
    return f"{name}[lazy]: /(.|\\n)*{pattern}/"


def text_value(name: str, closer: str, m: Markers) -> list[str]:
    """`name`: a string value and its closer. Where the closer is one special token (GLM's
    `</arg_value>`) or starts with one (Kimi K3's `<|close|>response<|sep|>`), any text and
    then the closer (text cannot hold its token)."""
    if m.starts_special(closer):
        return [f"{name}: {name.upper()}_TEXT {m(closer)}", f"{name.upper()}_TEXT: /(.|\\n)*/"]
    return [text_until(name, closer)]

