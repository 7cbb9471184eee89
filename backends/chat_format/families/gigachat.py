"""GigaChat 3.1 (ai-sage GigaChat3.1-10B-A1.8B, 702B-A36B): a call follows any answer text
as `<|function_call|>{"name": .., "arguments": {..}}`, one per turn (its template renders
only an assistant turn's first call) and nothing after it. Its template describes the tools
itself ("function descriptions") and shows results as `function result` turns. GigaChat 3
writes its calls as a separate `function call` message instead, and its template names no
`<|function_call|>`."""

from __future__ import annotations

from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.call_grammar import CallGrammar, Markers, call_rules
from backends.chat_format.families.base import Family
from backends.chat_format.tagged import CallSyntax

OPEN = "<|function_call|>"


def matches(template: str) -> bool:
    return OPEN in template and "<|role_sep|>" in template


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    _, rules = call_rules(tools)
    rules += ["rest: call", f"calls: {m(OPEN)} rest"]  # one call: the format has no list
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="gigachat",
    matches=matches,
    call_markers=(OPEN,),
    json_calls=CallSyntax((OPEN,)),
    one_call_per_turn=True,
    grammar=grammar,
)
