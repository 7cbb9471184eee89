"""MiniMax-M2: one block of invokes, each parameter a tag with its raw value:

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    <invoke name="get_time">
    </invoke>
    </minimax:tool_call>

A value is raw text (a string parameter as it is, any other as JSON). It thinks in
`<think>`, which its prompt opens. MiniMax-M2's template names `<minimax:tool_call>`.
MiniMax-M1 writes JSON in `<tool_calls>` (no family yet); M3 puts every tag behind its
namespace token (backends.chat_format.families.minimax_m3).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, lit
from backends.chat_format.families.base import Family
from backends.chat_format.xml_calls import (
    CallTags,
    Values,
    call_rules,
    ends_after,
    inside,
    text_until,
)

OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
INVOKES = CallTags(re.compile(r'\s*<invoke name="([^"\n]{1,200})">'),
                   re.compile(r'\s*<parameter name="([^"\n]{1,200})">'),
                   Values("</parameter>", ("<parameter name=", "</invoke>")),
                   re.compile(r"\s*</invoke>"))


def matches(template: str) -> bool:
    return OPEN in template


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    text = inside(block, CLOSE)
    return INVOKES.read(text, schemas) if text is not None else None


def invoke(tool: Tool, params: str) -> str:
    head = lit(f'<invoke name="{tool.name}">')
    return f'{head} "\\n" {params} "</invoke>"'


def param(key: str, value: str | None) -> str:
    head = lit(f'<parameter name="{key}">')
    return f"{head} mvalue" if value is None else f'{head} {value} "</parameter>\\n"'


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = call_rules(tools, invoke, param)
    rules.append(text_until("mvalue", "</parameter>\n"))
    many = ' ("\\n" fn)*' if parallel and tools else ""
    rules.append(f'rest: "\\n" fn{many} "\\n" {m(CLOSE)}')
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="minimax_m2",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    blocks=BlockSyntax((OPEN,), parse, end=ends_after("</invoke>", CLOSE)),
    grammar=grammar,
)
