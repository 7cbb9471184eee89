"""Llama 3.1-3.3: a call is the whole answer, `{"name": .., "parameters": {..}}` (several:
`;` between), or follows `<|python_tag|>`. Its template puts the tools in the first user
turn and takes one call per assistant turn."""

from __future__ import annotations

from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.call_grammar import CallGrammar, Markers, call_rules
from backends.chat_format.families.base import Family
from backends.chat_format.tagged import CallSyntax

PYTHON_TAG = "<|python_tag|>"


def matches(template: str) -> bool:
    return (PYTHON_TAG in template or ("<|start_header_id|>" in template
                                       and '"parameters": ' in template)) \
        and "<function=" not in template  # Functionary v3.1's calls (functionary_v3_1)


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    _, rules = call_rules(tools, "parameters")
    rules += ["rest: call", "calls: call"]  # one call: the format has no list
    return CallGrammar(rules, "{")


FAMILY = Family(
    name="llama3",
    matches=matches,
    call_markers=(PYTHON_TAG,),
    json_calls=CallSyntax((PYTHON_TAG,), bare_json=True),
    one_call_per_turn=True,
    grammar=grammar,
)
