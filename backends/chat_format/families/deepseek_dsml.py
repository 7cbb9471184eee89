"""DeepSeek V3.2 and V4's DSML: one block of invokes, each parameter saying whether its
value is a string (as it is) or JSON:

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

V3.2 names the block `function_calls`, V4 and V4-Flash `tool_calls`; the parser reads both,
the grammar lets the model write either (a grammar sees the tools, not the template).
They think in `<think>`, which the prompt opens when thinking is on (off: it ends in
`</think>`). Their templates set `dsml_token = '｜DSML｜'`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas, typed_value
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

DSML = "｜DSML｜"
BLOCKS = ("function_calls", "tool_calls")  # V3.2's, V4's
OPENS = tuple(f"<{DSML}{b}>" for b in BLOCKS)
CLOSES = tuple(f"</{DSML}{b}>" for b in BLOCKS)
PARAM_CLOSE = f"</{DSML}parameter>"


def read_value(text: str, tag: re.Match[str], schema: dict | None) -> object:
    """string="true": the text as it is; "false": JSON (text that is not stays text)."""
    if tag[2] == "true":
        return text
    try:
        return json.loads(text)
    except ValueError:
        return typed_value(text, schema)


INVOKES = CallTags(re.compile(rf'\s*<{DSML}invoke name="([^"\n]{{1,200}})">'),
                   re.compile(rf'\s*<{DSML}parameter name="([^"\n]{{1,200}})"'
                              r'(?: string="(true|false)")?>'),
                   Values(PARAM_CLOSE, (f"<{DSML}parameter ", f"</{DSML}invoke>")),
                   re.compile(rf"\s*</{DSML}invoke>"), read_value=read_value)


def matches(template: str) -> bool:
    return "dsml_token" in template and DSML in template


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    for close in CLOSES:
        text = inside(block, close)
        if text is not None:
            return INVOKES.read(text, schemas)
    return None


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    """The block named either way, its closer named as its opener. `｜DSML｜` is written
    as the token it is where the vocabulary has one (a string value is then any text
    ending in `</`, before that token)."""

    def text(t: str) -> str:
        parts = t.split(DSML)
        return " ".join([lit(parts[0])] * bool(parts[0]) + [
            piece for part in parts[1:] for piece in [m(DSML)] + [lit(part)] * bool(part)])

    def invoke(tool: Tool, params: str) -> str:
        head = text(f'<{DSML}invoke name="{tool.name}">')
        return f'{head} "\\n" {params} {text(f"</{DSML}invoke>")}'

    def param(key: str, value: str | None) -> str:
        # text, and an enum's literals, are strings; JSON of the schema is not
        string = "false" if value is not None and value.startswith("%json") else "true"
        head = text(f'<{DSML}parameter name="{key}" string="{string}">')
        closing = f'{text(PARAM_CLOSE)} "\\n"'
        return f"{head} dvalue" if value is None else f"{head} {value} {closing}"

    rules = call_rules(tools, invoke, param)
    if m.special(DSML):
        rules += [f'dvalue: DVALUE {m(DSML)} "parameter>\\n"', "DVALUE: /(.|\\n)*<\\//"]
    else:
        rules.append(text_until("dvalue", PARAM_CLOSE + "\n"))
    many = ' ("\\n" fn)*' if parallel and tools else ""
    rules.append("rest: " + " | ".join(f'{lit(b + ">")} "\\n" fn{many} "\\n" {text(close)}'
                                       for b, close in zip(BLOCKS, CLOSES, strict=True)))
    rules.append(f"calls: {text('<' + DSML)} rest")
    return CallGrammar(rules, "<" + DSML)


FAMILY = Family(
    name="deepseek_dsml",
    matches=matches,
    call_markers=(DSML, *OPENS, *CLOSES),
    blocks=BlockSyntax(OPENS, parse, end=ends_after(f"</{DSML}invoke>", *CLOSES)),
    grammar=grammar,
)
