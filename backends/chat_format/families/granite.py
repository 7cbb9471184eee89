"""IBM Granite 3.x (granite-3.3-2b/8b-instruct): `<|tool_call|>[{"name": .., "arguments":
{..}}, ..]`, the turn's calls as one JSON list after the marker, with no closer (the list
ends the block). The template takes the tools itself (`tools`, aliased to its
`available_tools` role) and tells the model this format in its default system prompt; it
renders only each turn's `content`, so Ember writes earlier calls into the assistant
turn's text in that same shape (results stay `tool` turns). Its thinking switch is its own
`thinking` variable (when there are no tools and no system turn, it then asks for
`<think>..</think><response>..</response>`; the response tags are dropped). Granite 4
writes Hermes' `<tool_call>` blocks (backends.chat_format.families.hermes)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from backends.base import Message, Tool
from backends.chat_format import pythonic
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas, json_list_calls
from backends.chat_format.call_grammar import CallGrammar, Markers, call_rules
from backends.chat_format.families.base import THINK, Family

OPEN = "<|tool_call|>"
RESPONSE = ("<response>", "</response>")


def matches(template: str) -> bool:
    return OPEN in template and "<|start_of_role|>" in template


def block_end(text: str, final: bool) -> int | None:
    """Where the list after the marker closes (brackets in strings skipped); 0 when no
    list follows."""
    start = len(text) - len(text.lstrip())
    if start == len(text):
        return None
    return pythonic.bracket_end(text, start) if text[start] == "[" else 0


def parse(text: str, schemas: Schemas) -> list[ParsedCall] | None:
    return json_list_calls(text, schemas)


def calls_as_text(messages: tuple[Message, ...], tools: tuple[Tool, ...]) -> tuple[Message, ...]:
    """Each assistant turn's calls as the text the model writes (its template shows no
    `tool_calls`)."""
    out = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            listed = json.dumps([{"name": c.name, "arguments": json.loads(c.arguments or "{}")}
                                 for c in m.tool_calls], ensure_ascii=False)
            m = Message("assistant", f"{m.content}{OPEN}{listed}")
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
    thinking=THINK,
    blocks=BlockSyntax((OPEN,), parse, end=block_end, drop=RESPONSE),
    history_as_text=calls_as_text,
    thinking_variable="thinking",
    grammar=grammar,
)
