"""MiniCPM 5 (openbmb MiniCPM5-1B): `<function name="get_weather"><param name="city">Paris
</param></function>`, one tag per call after any answer text, each argument a `param`
whose text is typed by its schema (a string as written, other values as JSON); a value
holding `<`, `&` or a newline comes in `<![CDATA[..]]>`, so a closer inside it is text. It
thinks in `<think>..</think>` first. Its template spells the format out after the tools
and renders earlier calls and results itself."""

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
from backends.chat_format.call_grammar import TOOL_JSON, CallGrammar, Markers, json_rule, lit
from backends.chat_format.families.base import Family

OPEN, CLOSE = '<function name="', "</function>"
PARAM, PARAM_CLOSE = '<param name="', "</param>"
CDATA, CDATA_CLOSE = "<![CDATA[", "]]>"
NAME = re.compile(r'([^"<>\s]+)">')


def matches(template: str) -> bool:
    return OPEN in template and PARAM in template


def read(text: str) -> tuple[int, str, list[tuple[str, str]]] | None:
    """(where the call ends, its name, its (key, value text) params), or None while it is
    not whole. Raises ValueError where it is no call."""
    name = NAME.match(text)
    if name is None:
        if '">' in text or len(text) > 200:
            raise ValueError("no name")
        return None
    at, params = name.end(), list[tuple[str, str]]()
    while True:
        at += len(text[at:]) - len(text[at:].lstrip())
        rest = text[at:]
        if rest.startswith(CLOSE):
            return at + len(CLOSE), name.group(1), params
        if not rest.startswith(PARAM):
            if CLOSE.startswith(rest) or PARAM.startswith(rest):
                return None
            raise ValueError("neither a param nor the closer")
        key_end = text.find('">', at)
        if key_end < 0:
            return None
        key, at = text[at + len(PARAM):key_end], key_end + 2
        if text.startswith(CDATA, at):
            value_end = text.find(CDATA_CLOSE, at)
            if value_end < 0:
                return None
            value, at = text[at + len(CDATA):value_end], value_end + len(CDATA_CLOSE)
            if not text.startswith(PARAM_CLOSE, at):
                if PARAM_CLOSE.startswith(text[at:]):
                    return None
                raise ValueError("text after a CDATA value")
        else:
            value_end = text.find(PARAM_CLOSE, at)
            if value_end < 0:
                return None
            value, at = text[at:value_end], value_end
        params.append((key, value))
        at += len(PARAM_CLOSE)


def block_end(text: str, final: bool) -> int | None:
    try:
        found = read(text)
    except ValueError:
        return 0
    return None if found is None else found[0]


def parse(text: str, schemas: Schemas) -> list[ParsedCall] | None:
    found = read(text)
    if found is None or found[1] not in schemas:
        return None
    _, name, params = found
    arguments = {key: typed_value(value, parameter_schema(schemas, name, key))
                 for key, value in params}
    return [ParsedCall(name, arguments)]


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    """Strings as plain text without `<` or `&` (the form that needs no CDATA), other
    values as JSON; the schema's properties in order, required ones always."""
    rules = []
    for i, tool in enumerate(tools):
        props = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or ())
        parts = []
        for j, (key, schema) in enumerate(props.items()):
            schema = schema if isinstance(schema, dict) else {}
            value = ("/[^<&]*/" if schema.get("type") == "string"
                     else json_rule(schema, TOOL_JSON))
            rules.append(f"call_{i}_{j}: {lit(PARAM + key + chr(34) + '>')} {value} "
                         f"{lit(PARAM_CLOSE)}")
            parts.append(f"call_{i}_{j}" if key in required else f"call_{i}_{j}?")
        rules.append(f"call_{i}: {lit(tool.name + chr(34) + '>')} {' '.join(parts)} "
                     f"{lit(CLOSE)}")
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    rules.append("rest: call" + (f' ("\\n" {lit(OPEN)} call)*' if parallel and tools else ""))
    rules.append(f"calls: {lit(OPEN)} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="minicpm5",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    blocks=BlockSyntax((OPEN,), parse, end=block_end, drop=(CLOSE,)),
    grammar=grammar,
)
