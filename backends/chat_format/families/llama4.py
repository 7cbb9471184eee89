"""Llama 4 (Scout, Maverick): calls are the whole answer, at its start, in either of two
shapes, sometimes inside `<|python_start|>..<|python_end|>`:

  pythonic  [get_weather(city='LA'), get_time()]   the format Meta trained for (its prompt
            format guide); Python literals as values, read by backends.chat_format.pythonic
  JSON      {"name": "get_weather", "parameters": {"city": "LA"}}   one object per call,
            back to back (`;` or whitespace between taken too): what its chat template asks
            for and how it renders earlier calls (after an empty `<|python_start|>
            <|python_end|>`)

Its template (`<|header_start|>role<|header_end|>`, turns end with `<|eot|>`) puts the
tools in the first user turn. A call naming no offered tool, or any text before the call,
is answer text. The grammar forces the JSON shape, which the template itself shows."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format import pythonic
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, call_rules
from backends.chat_format.families.base import Family

PY_START, PY_END = "<|python_start|>", "<|python_end|>"
JSON_HEAD = '"name"'
BETWEEN = re.compile(r"[\s;]*")


def skip_between(text: str, at: int) -> int:
    """Past the whitespace and `;` between two call objects."""
    found = BETWEEN.match(text, at)
    return found.end() if found else at


def matches(template: str) -> bool:
    return "<|header_start|>" in template and "<|eot|>" in template


def block_end(text: str, final: bool) -> int | None:
    if text.startswith("["):
        return pythonic.list_end(text, final)
    head = text[1:].lstrip()
    if not head.startswith(JSON_HEAD):
        return None if JSON_HEAD.startswith(head) and not final else 0
    end = pythonic.bracket_end(text)
    while end is not None:  # more objects may follow, one per call
        after = skip_between(text, end)
        if after == len(text):
            return end if final else None
        if text[after] != "{":
            return end
        end = pythonic.bracket_end(text, after)
    return None


def parse(text: str, schemas: Schemas) -> list[ParsedCall] | None:
    if text.startswith("["):
        return pythonic.read_calls(text, schemas.keys())
    calls, at, decoder = [], 0, json.JSONDecoder()
    while at < len(text):
        try:
            obj, at = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            return None
        at = skip_between(text, at)
        if not isinstance(obj, dict):
            return None
        name = obj.get("name")
        arguments = obj.get("parameters", obj.get("arguments", {}))
        if not isinstance(name, str) or name not in schemas or not isinstance(arguments, dict):
            return None
        calls.append(ParsedCall(name, arguments))
    return calls or None


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    _, rules = call_rules(tools, "parameters")
    rules += ["rest: call", "calls: call" + (" call*" if parallel and tools else "")]
    return CallGrammar(rules, "{")


FAMILY = Family(
    name="llama4",
    matches=matches,
    call_markers=(PY_START, PY_END),
    blocks=BlockSyntax(("[", "{"), parse, end=block_end, lead=True, drop=(PY_START, PY_END)),
    grammar=grammar,
)
