"""Hermes: `<tool_call>\\n{"name": .., "arguments": {..}}\\n</tool_call>`, one block per call
(Qwen2.5, Qwen3, QwQ, SmolLM3's tool template, Hermes 2 Pro and 3, Granite 4), thinking in
`<think>` where the template names it. The template shows the model a JSON object right
after `<tool_call>`; Qwen3-Coder's XML calls also start with `<tool_call>`, so the JSON
object is what tells the two apart."""

from __future__ import annotations

import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.call_grammar import CallGrammar, Markers, call_rules
from backends.chat_format.families.base import Family
from backends.chat_format.tagged import CallSyntax

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# the JSON object after the marker, as the template writes it: in a string ("\n{") or as text
JSON_AFTER_OPEN = re.compile(r"<tool_call>(?:\\n|\s)*(?:\{|' ?\+ ?tool_call|'?\s*\}\}\s*\{)")


def matches(template: str) -> bool:
    return OPEN in template and JSON_AFTER_OPEN.search(template) is not None \
        and "<function=" not in template and "<arg_key>" not in template


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    _, rules = call_rules(tools)
    open_, close = m(OPEN), m(CLOSE)
    many = parallel and len(tools) > 0
    rules.append(f'rest: "\\n" call "\\n" {close}' + (' ("\\n" block)*' if many else ""))
    rules.append(f'block: {open_} "\\n" call "\\n" {close}')
    rules.append(f"calls: {open_} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="hermes",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    json_calls=CallSyntax((OPEN,), CLOSE, bare_json=True),
    grammar=grammar,
)
