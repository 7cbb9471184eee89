"""Functionary v3.1 (meetkai functionary-small/medium-v3.1, on Llama 3.1):
`<function=get_weather>{"city": "Paris"}</function>`, one tag per call, after any text; its
template spells the format out in the system turn and renders earlier calls the same way.
(A `<|python_tag|>` turn is code for its code interpreter, not a call.) The template is a
Llama 3.1 one, so the llama3 family leaves templates that name `<function=` to this one."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format import pythonic
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, args_rule, lit
from backends.chat_format.families.base import Family

OPEN, CLOSE = "<function=", "</function>"
NAME = re.compile(r"([\w.-]+)>")
NAME_SO_FAR = re.compile(r"[\w.-]*")


def matches(template: str) -> bool:
    return OPEN in template and CLOSE in template and "<|start_header_id|>" in template


def block_end(text: str, final: bool) -> int | None:
    """Past `</function>` after the name and its JSON object (a closer inside a string is
    text); 0 when what follows the opener is no name."""
    name = NAME.match(text)
    if name is None:
        return None if NAME_SO_FAR.fullmatch(text) else 0  # (at the end: a cut call)
    end = pythonic.closed_list_end(text[name.end():], final, CLOSE, "{")
    return None if end is None else name.end() + end


def parse(text: str, schemas: Schemas) -> list[ParsedCall] | None:
    name = NAME.match(text)
    if name is None or name.group(1) not in schemas:
        return None
    try:
        arguments = json.loads(text[name.end():].rstrip().removesuffix(CLOSE) or "{}")
    except (ValueError, RecursionError):
        return None
    return [ParsedCall(name.group(1), arguments)] if isinstance(arguments, dict) else None


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = [f"call_{i}: {lit(t.name + '>')} {args_rule(t)} {lit(CLOSE)}"
             for i, t in enumerate(tools)]
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    rules.append("rest: call" + (f" ({lit(OPEN)} call)*" if parallel and tools else ""))
    rules.append(f"calls: {lit(OPEN)} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="functionary_v3_1",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    blocks=BlockSyntax((OPEN,), parse, end=block_end, drop=(CLOSE,)),
    grammar=grammar,
)
