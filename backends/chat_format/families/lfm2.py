"""Liquid LFM2 and LFM2.5 (LFM2-8B-A1B, LFM2.5-1.2B-Instruct, LFM2.5-8B-A1B):
`<|tool_call_start|>[get_weather(city="Paris"), get_time()]<|tool_call_end|>`, pythonic
calls (backends.chat_format.pythonic) in a marked block, which may follow answer text; the
thinking models think in `<think>..</think>` first. Their templates list the tools in the
system turn ("List of tools: <|tool_list_start|>[..]<|tool_list_end|>", LFM2.5 "List of
tools: [..]") and render only each turn's `content`, so Ember writes earlier calls into the
assistant turn's text in the same block (results stay `tool` turns)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from backends.base import Message, Tool
from backends.chat_format import pythonic
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers
from backends.chat_format.families.base import Family

OPEN, CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"


def matches(template: str) -> bool:
    return "List of tools: " in template


def block_end(text: str, final: bool) -> int | None:
    return pythonic.closed_list_end(text, final, CLOSE)


def parse(text: str, schemas: Schemas) -> list[ParsedCall] | None:
    text = text.rstrip()
    return pythonic.read_calls(text.removesuffix(CLOSE), schemas.keys())


def calls_as_text(messages: tuple[Message, ...], tools: tuple[Tool, ...]) -> tuple[Message, ...]:
    out = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            listed = ", ".join(pythonic.call_text(c.name, json.loads(c.arguments or "{}"))
                               for c in m.tool_calls)
            m = Message("assistant", f"{m.content}{OPEN}[{listed}]{CLOSE}")
        out.append(m)
    return tuple(out)


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = pythonic.call_rules(tools)
    more = ' (", " call)*' if parallel and tools else ""
    rules.append(f'rest: "[" call{more} "]" {m(CLOSE)}')
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="lfm2",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    blocks=BlockSyntax((OPEN,), parse, end=block_end, drop=(CLOSE,)),
    history_as_text=calls_as_text,
    grammar=grammar,
)
