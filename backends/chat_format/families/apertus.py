"""Swiss AI Apertus (Apertus-8B/70B-Instruct-2509): `<|tools_prefix|>[{"get_weather":
{"city": "Paris"}}, ..]<|tools_suffix|>`, the turn's calls as one JSON list of objects,
each the tool's name as its only key and the arguments as its value. With deliberation on
(`enable_thinking`) it thinks in `<|inner_prefix|>..<|inner_suffix|>`. Its template renders
tools (as TypeScript-like declarations), earlier calls and their results (inside the
assistant turn) itself."""

from __future__ import annotations

import json
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format import pythonic
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, args_rule, lit
from backends.chat_format.families.base import Family

OPEN, CLOSE = "<|tools_prefix|>", "<|tools_suffix|>"
THINKING = ThinkingMarkers("<|inner_prefix|>", "<|inner_suffix|>")


def matches(template: str) -> bool:
    return OPEN in template and CLOSE in template


def block_end(text: str, final: bool) -> int | None:
    return pythonic.closed_list_end(text, final, CLOSE)


def parse(text: str, schemas: Schemas) -> list[ParsedCall] | None:
    try:
        listed = json.loads(text.rstrip().removesuffix(CLOSE))
    except (ValueError, RecursionError):
        return None
    if not isinstance(listed, list):
        return None
    calls = []
    for item in listed:
        if not isinstance(item, dict) or len(item) != 1:
            return None
        (name, arguments), = item.items()
        if name not in schemas or not isinstance(arguments, dict):
            return None
        calls.append(ParsedCall(name, arguments))
    return calls or None


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = [f"call_{i}: {lit('{' + json.dumps(t.name, ensure_ascii=False) + ': ')} "
             f"{args_rule(t)} \"}}\"" for i, t in enumerate(tools)]
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    more = ' (", " call)*' if parallel and tools else ""
    rules.append(f'rest: "[" call{more} "]" {m(CLOSE)}')
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="apertus",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    thinking=THINKING,
    blocks=BlockSyntax((OPEN,), parse, end=block_end, drop=(CLOSE,)),
    grammar=grammar,
)
