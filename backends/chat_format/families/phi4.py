"""Phi-4-mini: the tools go in the system message's own `tools` field as JSON text (its
template: `'<|tool|>' + message['tools'] + '<|/tool|>'`), and the model answers
`<|tool_call|>[{"name": .., "arguments": {..}}, ..]<|/tool_call|>`."""

from __future__ import annotations

import json
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.call_grammar import CallGrammar, Markers, list_grammar
from backends.chat_format.families.base import Family
from backends.chat_format.tagged import CallSyntax

OPEN, CLOSE = "<|tool_call|>", "<|/tool_call|>"


def matches(template: str) -> bool:
    return "<|tool|>" in template


def place_tools(dicts: list[dict], tools: list[dict]) -> list[dict]:
    listed = json.dumps([t["function"] for t in tools], ensure_ascii=False)
    if dicts and dicts[0]["role"] == "system":
        return [{**dicts[0], "tools": listed}, *dicts[1:]]
    return [{"role": "system", "content": "", "tools": listed}, *dicts]


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    return list_grammar(tools, parallel, m, OPEN, CLOSE)


FAMILY = Family(
    name="phi4",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    json_calls=CallSyntax((OPEN,), CLOSE),
    tools_placer=place_tools,
    grammar=grammar,
)
