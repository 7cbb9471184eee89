"""Kimi K2 (moonshotai Kimi-K2, K2-Instruct, K2-Thinking): calls in one section after any
answer text, each with an id `functions.NAME:INDEX` and its JSON arguments, thinking in
`<think>` in K2-Thinking (the model opens it itself):

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>
    functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>
    <|tool_calls_section_end|>

(on several lines here; the model writes no newlines). The templates render `tools`
themselves; the first K2's names a result by its call's id, so earlier calls get ids of
this shape (`kimi_ids`). K2-Thinking may open its calls with the thinking still open: the
section's opener ends it. Kimi K3 writes another format (families.kimi_k3)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, args_rule, lit
from backends.chat_format.families.base import Family
from backends.chat_format.json_extent import JsonCallsEnd, JsonScan, json_object

OPEN, CLOSE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL, ARGS, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
HEAD = re.compile(r"\s*" + re.escape(CALL) + r"\s*(?:functions\.)?([\w.\-]{1,256}?)(?::\d{1,9})?"
                  r"\s*" + re.escape(ARGS) + r"\s*")
TAIL = re.compile(r"\s*" + re.escape(CALL_END))


def matches(template: str) -> bool:
    return OPEN in template and CALL in template


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    """The calls of a section (up to and with its closer, which the end rule includes)."""
    text = block[:-len(CLOSE)] if block.endswith(CLOSE) else block
    calls: list[ParsedCall] = []
    pos = 0
    while (head := HEAD.match(text, pos)) is not None:
        scan = JsonScan()
        end = scan.advance(text, head.end())
        tail = TAIL.match(text, end) if scan.done else None
        arguments = json_object(text[head.end():end]) if tail is not None else None
        if arguments is None or tail is None:
            return None
        calls.append(ParsedCall(head.group(1), arguments))
        pos = tail.end()
    return calls if calls and not text[pos:].strip() else None


def block_end() -> JsonCallsEnd:
    return JsonCallsEnd((ARGS,), CLOSE)


def kimi_ids(dicts: list[dict], template: str) -> list[dict]:
    """Earlier calls' ids as Kimi writes them (`functions.NAME:INDEX`, the index within the
    turn, as the first K2 template counts), and their results' the same."""
    renamed: dict[str, str] = {}
    out = []
    for d in dicts:
        if d.get("tool_calls"):
            calls = []
            for i, call in enumerate(d["tool_calls"]):
                new = f"functions.{call['function']['name']}:{i}"
                renamed[call["id"]] = new
                calls.append({**call, "id": new})
            d = {**d, "tool_calls": calls}
        elif d["role"] == "tool" and d.get("tool_call_id") in renamed:
            d = {**d, "tool_call_id": renamed[d["tool_call_id"]]}
        out.append(d)
    return out


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = [f"call_{i}: {m(CALL)} {lit(f'functions.{t.name}:')} /[0-9]{{1,3}}/ {m(ARGS)} "
             f"{args_rule(t)} {m(CALL_END)}" for i, t in enumerate(tools)]
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    rules.append("rest: call" + (" call*" if parallel and tools else "") + f" {m(CLOSE)}")
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="kimi_k2",
    matches=matches,
    call_markers=(OPEN, CLOSE, CALL, ARGS, CALL_END),
    blocks=BlockSyntax((OPEN,), parse, block_end=block_end, opens_end_thinking=True),
    shape_turns=kimi_ids,
    grammar=grammar,
)
