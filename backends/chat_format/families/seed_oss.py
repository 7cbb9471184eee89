"""ByteDance Seed-OSS: Qwen3-Coder's function inside its own markers, values without the
newlines around them, one block per call:

    <seed:think>...</seed:think>
    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    </function>
    </seed:tool_call>

It thinks in `<seed:think>` (opened by the model; with a thinking budget it reports its
spending inside the thinking in `<seed:cot_budget_reflect>`, which stays thinking text).
Its template has no thinking switch: thinking off is `thinking_budget` 0, which closes the
thinking in the prompt (backends.chat_format.render).
Seed-OSS-36B's template names `<seed:tool_call>`.
"""

from __future__ import annotations

from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, lit
from backends.chat_format.families.base import Family
from backends.chat_format.families.qwen3_coder import function, function_tags
from backends.chat_format.xml_calls import call_rules, ends_after, inside, text_until

OPEN, CLOSE = "<seed:tool_call>", "</seed:tool_call>"
THINK = ThinkingMarkers("<seed:think>", "</seed:think>")
FUNCTIONS = function_tags(trim=False)


def matches(template: str) -> bool:
    return OPEN in template


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    text = inside(block, CLOSE)
    return FUNCTIONS.read(text, schemas) if text is not None else None


def param(key: str, value: str | None) -> str:
    head = lit(f"<parameter={key}>")
    return f"{head} svalue" if value is None else f'{head} {value} "</parameter>\\n"'


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = call_rules(tools, function, param)
    rules.append(text_until("svalue", "</parameter>\n"))
    open_, close = m(OPEN), m(CLOSE)
    many = ' ("\\n" block)*' if parallel and tools else ""
    rules.append(f'rest: "\\n" fn "\\n" {close}{many}')
    rules.append(f'block: {open_} "\\n" fn "\\n" {close}')
    rules.append(f"calls: {open_} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="seed_oss",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    thinking=THINK,
    blocks=BlockSyntax((OPEN,), parse, end=ends_after("</function>", CLOSE)),
    grammar=grammar,
)
