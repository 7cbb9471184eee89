"""Cohere's action blocks, Command R7B (c4ai-command-r7b-12-2024) and Cohere2 MoE: the model
plans in `<|START_THINKING|>..<|END_THINKING|>` (Cohere2 MoE's prompt opens it), then
either calls, `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": .., "parameters": {..}},
..]<|END_ACTION|>`, or answers, `<|START_RESPONSE|>..<|END_RESPONSE|>` (R7B) or
`<|START_TEXT|>..<|END_TEXT|>` (Cohere2 MoE); the answer markers are dropped. Their
templates render tools, earlier calls with their plan, and results themselves. Command R+
writes "Action:" and a ```json fence instead: not this family."""

from __future__ import annotations

import json
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format import pythonic
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas, json_list_calls
from backends.chat_format.call_grammar import CallGrammar, Markers, args_rule, lit
from backends.chat_format.families.base import Family

OPEN, CLOSE = "<|START_ACTION|>", "<|END_ACTION|>"
ANSWER = ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>")
THINKING = ThinkingMarkers("<|START_THINKING|>", "<|END_THINKING|>")


def matches(template: str) -> bool:
    return OPEN in template and (ANSWER[0] in template or ANSWER[2] in template)


def block_end(text: str, final: bool) -> int | None:
    return pythonic.closed_list_end(text, final, CLOSE)


def parse(text: str, schemas: Schemas) -> list[ParsedCall] | None:
    return json_list_calls(text.rstrip().removesuffix(CLOSE), schemas, "tool_name", "parameters")


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = [f"call_{i}: {lit('{' + json.dumps('tool_name') + ': ' + json.dumps(t.name))} "
             f"{lit(', ' + json.dumps('parameters') + ': ')} {args_rule(t)} \"}}\""
             for i, t in enumerate(tools)]
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    more = ' (", " call)*' if parallel and tools else ""
    rules.append(f'rest: "[" call{more} "]" {m(CLOSE)}')
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="cohere_action",
    matches=matches,
    call_markers=(OPEN, CLOSE, *ANSWER),
    thinking=THINKING,
    blocks=BlockSyntax((OPEN,), parse, end=block_end, drop=(CLOSE, *ANSWER)),
    grammar=grammar,
)
