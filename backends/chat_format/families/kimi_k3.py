"""Kimi K3: the answer is tagged sections, `<|open|>TAG attrs<|sep|>` .. `<|close|>TAG<|sep|>`
(the three markers are special tokens, the tag names text): thinking, the response, then
the calls, one tag per argument with its JSON type, the value as raw text:

    <|open|>think<|sep|>The user wants Paris.<|close|>think<|sep|>
    <|open|>response<|sep|>Checking.<|close|>response<|sep|>
    <|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>
    <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
    <|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>

(on several lines here; the model writes no newlines). A call's arguments may instead be
one JSON object, `<|open|>json type="object"<|sep|>{..}<|close|>json<|sep|>`. The template
opens the thinking itself (its `thinking` is on unless a caller says otherwise); the
response's and the message's tags frame the answer and are dropped. Attribute values
escape `&` and `"` as `&amp;` and `&quot;`.

The grammar (for `required`, a named tool, JSON mode with tools) writes, after the
thinking, the response frame's tags at most (no text: a forced call is the whole answer;
with thinking off the prompt has opened the frame, and the grammar may close it), then the
tools section with each call's arguments as the JSON object of its tool's schema, and the
message's close:

    <|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>
    <|open|>json type="object"<|sep|>{"city": "Paris"}<|close|>json<|sep|>
    <|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>

Each marker is its special tokens and text (call_grammar.Markers), so a model whose
vocabulary has them writes them as its tokens. `auto` with tools is left free for the
parser to read (Family.lazy_grammar): its answer is framed in those tokens, which the lazy
answer grammar (free text, then a trigger) cannot frame. No K3 vocabulary ships: the
grammar is checked on a stand-in with the three markers as special tokens, and as text.
Its template's thinking switch is `thinking` (on unless said): a request that switches
thinking off sets it false, and the template then opens the response instead."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.block import (
    BlockSyntax,
    ParsedCall,
    Schemas,
    parameter_schema,
    typed_value,
)
from backends.chat_format.call_grammar import CallGrammar, Markers, args_rule, lit
from backends.chat_format.families.base import Family

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
THINK = ThinkingMarkers(f"{OPEN}think{SEP}", f"{CLOSE}think{SEP}")
TOOLS, TOOLS_END = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"
FRAME = (f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}", f"{CLOSE}message{SEP}",
         f'{OPEN}message role="assistant"{SEP}', "<|end_of_msg|>")
_O, _C, _S = (re.escape(t) for t in (OPEN, CLOSE, SEP))
_ATTRS = r'((?:\s+\w+="[^"]*")*)\s*'
CALL = re.compile(rf"\s*{_O}call{_ATTRS}{_S}")
ARGUMENT = re.compile(rf"\s*{_O}argument{_ATTRS}{_S}")
JSON_ARGS = re.compile(rf"\s*{_O}json{_ATTRS}{_S}")
CALL_END = re.compile(rf"\s*{_C}call{_S}")
ATTR = re.compile(r'(\w+)="([^"]*)"')
JSON_TYPES = {"number", "boolean", "null", "object", "array", "integer"}


def matches(template: str) -> bool:
    return OPEN in template and CLOSE in template and "<|end_of_msg|>" in template


def _attrs(text: str) -> dict[str, str]:
    return {k: v.replace("&quot;", '"').replace("&amp;", "&") for k, v in ATTR.findall(text)}


def _until(text: str, pos: int, closer: str) -> tuple[str, int]:
    end = text.find(closer, pos)
    if end < 0:
        raise ValueError(f"{closer} missing")
    return text[pos:end], end + len(closer)


def _call(text: str, pos: int, schemas: Schemas) -> tuple[ParsedCall, int] | None:
    head = CALL.match(text, pos)
    name = _attrs(head.group(1)).get("tool") if head else None
    if head is None or not name:
        return None
    pos, arguments = head.end(), {}
    if (whole := JSON_ARGS.match(text, pos)) is not None:
        body, pos = _until(text, whole.end(), f"{CLOSE}json{SEP}")
        value = json.loads(body)
        if not isinstance(value, dict):
            return None
        arguments = value
    while (arg := ARGUMENT.match(text, pos)) is not None:
        attrs = _attrs(arg.group(1))
        value_text, pos = _until(text, arg.end(), f"{CLOSE}argument{SEP}")
        key, kind = attrs.get("key", ""), attrs.get("type")
        if kind == "string":
            arguments[key] = value_text
        elif kind in JSON_TYPES:
            arguments[key] = json.loads(value_text)
        else:
            arguments[key] = typed_value(value_text, parameter_schema(schemas, name, key))
    end = CALL_END.match(text, pos)
    return (ParsedCall(name, arguments), end.end()) if end is not None else None


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    """The calls of a tools section (its text between the section's tags)."""
    calls, pos = [], 0
    try:
        while (found := _call(block, pos, schemas)) is not None:
            calls.append(found[0])
            pos = found[1]
    except RecursionError:  # a JSON value nested past what json reads: not a call
        return None
    return calls if calls and not block[pos:].strip() else None


# -- the grammar: the frame, the tools section, each call's arguments as one JSON object --
JSON_OPEN, QUOTE = 'json type="object"', '"'


def _attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;")


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    o, c, s = m(OPEN), m(CLOSE), m(SEP)
    rules: list[str] = []
    for i, tool in enumerate(tools):
        head = lit(f'call tool="{_attr(tool.name)}" index="')
        rules.append(f"call_{i}: {o} {head} /[1-9][0-9]{{0,2}}/ {lit(QUOTE)} {s} {o} "
                     f"{lit(JSON_OPEN)} {s} {args_rule(tool)} {c} \"json\" {s} "
                     f"{c} \"call\" {s}")
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    end = FRAME[-1]
    tail = f" ({c} \"message\" {s})?" + ("" if m.ends_generation(end) else f" {m(end)}?")
    rules.append("rest: call" + (" call*" if parallel and tools else "")
                 + f" {c} \"tools\" {s}{tail}")
    # a forced call has no text before it (as in every family's forced grammar): at most
    # the response frame opened and closed empty, as the template renders a turn of calls,
    # or only closed where the prompt opened it (thinking switched off)
    rules.append(f'calls: ({o} "response" {s})? ({c} "response" {s})? {o} "tools" {s} rest')
    return CallGrammar(rules, TOOLS)


FAMILY = Family(
    name="kimi_k3",
    matches=matches,
    call_markers=(OPEN, CLOSE, SEP),
    thinking=THINK,
    builds_thinking=True,
    thinking_variable="thinking",
    blocks=BlockSyntax((TOOLS,), parse, close=TOOLS_END, drop=FRAME),
    grammar=grammar,
    lazy_grammar=False,
)
