"""The tool calls of an answer, for tests that must work before and after the per-format
output parsers land: DoneEvent.tool_calls when the parser found calls, else the calls
written in the raw answer text (any of the formats of backends.grammar.lark: every JSON
object with a "name" and "arguments" or "parameters", outside the others)."""

from __future__ import annotations

import json
import re

from backends.base import DoneEvent

HARMONY_CALL = re.compile(r"to=functions\.([\w.-]+)")


def calls_in_text(text: str) -> list[tuple[str, dict]]:
    decoder = json.JSONDecoder()
    calls: list[tuple[str, dict]] = []
    i = 0
    while (i := text.find("{", i)) >= 0:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        if isinstance(value, dict) and "name" in value:
            args = value.get("arguments", value.get("parameters"))
            if isinstance(args, dict):
                calls.append((value["name"], args))
                i = end
                continue
        harmony = HARMONY_CALL.search(text[:i])
        if harmony and isinstance(value, dict):
            calls.append((harmony.group(1), value))
            i = end
            continue
        i += 1
    return calls


def tool_calls(done: DoneEvent) -> list[tuple[str, dict]]:
    """(name, arguments) of each call the answer made."""
    if done.tool_calls:
        return [(c.name, json.loads(c.arguments)) for c in done.tool_calls]
    return calls_in_text(done.text)
