"""IBM Granite 3.x (granite-3.3-2b/8b-instruct): `<|tool_call|>[{"name": .., "arguments":
{..}}, ..]`, the turn's calls as one JSON list after the marker, with no closer. The
template takes the tools itself (`tools`, aliased to its `available_tools` role) and tells
the model this format in its default system prompt; it renders only each turn's `content`,
so Ember writes earlier calls into the assistant turn's text in that same shape (results
stay `tool` turns). It thinks in `<think>..</think>` (then `<response>..</response>`) only
when asked through its own `thinking` switch, which Ember does not set. Granite 4 writes
Hermes' `<tool_call>` blocks (backends.chat_format.families.hermes)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from backends.base import Message, Tool
from backends.chat_format.call_grammar import CallGrammar, Markers, call_rules
from backends.chat_format.families.base import Family
from backends.chat_format.tagged import CallSyntax

OPEN = "<|tool_call|>"


def matches(template: str) -> bool:
    return OPEN in template and "<|start_of_role|>" in template


def calls_as_text(messages: tuple[Message, ...], tools: tuple[Tool, ...]) -> tuple[Message, ...]:
    """Each assistant turn's calls as the text the model writes (its template shows no
    `tool_calls`)."""
    out = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            listed = json.dumps([{"name": c.name, "arguments": json.loads(c.arguments or "{}")}
                                 for c in m.tool_calls], ensure_ascii=False)
            text = f"{m.content}{OPEN}{listed}" if m.content else f"{OPEN}{listed}"
            m = Message("assistant", text)
        out.append(m)
    return tuple(out)


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    _, rules = call_rules(tools)
    more = ' (", " call)*' if parallel and tools else ""
    rules.append(f'rest: "[" call{more} "]"')
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="granite",
    matches=matches,
    call_markers=(OPEN,),
    json_calls=CallSyntax((OPEN,)),
    history_as_text=calls_as_text,
    grammar=grammar,
)
