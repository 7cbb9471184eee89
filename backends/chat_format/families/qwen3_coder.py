"""Qwen3-Coder's XML calls, one block per call:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Each value is raw text between newlines (a string parameter as it is, any other as JSON).
Qwen3-Coder sometimes leaves `<tool_call>` out and starts at `<function=NAME>`: that call is
read too (as llama.cpp reads it), when the parameters' tags follow its name.
Qwen3-Coder, Qwen3.5 (thinking in `<think>`, which its prompt opens), NVIDIA Nemotron 3 Nano
(the same, its prompt opening `<think>` too) and StepFun-3.5-Flash write it; their templates
name `<tool_call>`, `<function=` and `<parameter=`. Seed-OSS writes the same function inside
its own `<seed:tool_call>` (backends.chat_format.families.seed_oss).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, lit
from backends.chat_format.families.base import Family, mentions
from backends.chat_format.xml_calls import (
    GAP,
    CallTags,
    Values,
    call_rules,
    ends_after,
    inside,
    text_until,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def function_tags(trim: bool) -> CallTags:
    """`<function=NAME><parameter=KEY>VALUE</parameter>..</function>` (Seed-OSS's too)."""
    return CallTags(re.compile(r"\s*<function=([^>\n]{1,200})>"),
                    re.compile(r"\s*<parameter=([^>\n]{1,200})>"),
                    Values("</parameter>", ("<parameter=", "</function>")),
                    re.compile(r"\s*</function>"), trim=trim)


FUNCTIONS = function_tags(trim=True)
BARE = "<function="  # a call without its <tool_call>
NAME = re.compile(r"[\w.\-]{1,200}>")
NAME_SO_FAR = re.compile(r"[\w.\-]{0,200}")
NEXT_TAGS = ("<parameter=", "</function>")
FUNCTION_CLOSE = "</function>"
WRAPPED_END = ends_after("</function>", CLOSE)
LEADING_SPACE = re.compile(r"\s*")


def matches(template: str) -> bool:
    return mentions(template, OPEN, "<function=", "<parameter=")


def wrapped(text: str) -> bool:
    """The block's text is what follows `<tool_call>` (not a bare `<function=`'s name)."""
    space = LEADING_SPACE.match(text, 0, GAP)
    start = space.end() if space else 0
    head = text[start:start + len(BARE)]
    return head == BARE or (BARE.startswith(head) and not text[:1].isalnum())


def end(text: str, final: bool) -> int | None:
    """A `<tool_call>` block ends at its closer after `</function>`; a bare call at its
    `</function>` (and a `</tool_call>` right after it). A bare opener that no name and
    parameter tags follow is text (0: the block ends where it starts)."""
    if wrapped(text):
        return WRAPPED_END(text, final)
    name = NAME.match(text)
    if name is None:
        return None if NAME_SO_FAR.fullmatch(text) else 0
    after = text[name.end():name.end() + GAP].lstrip()
    if not any(after.startswith(t) or t.startswith(after) for t in NEXT_TAGS):
        return 0
    at = text.find(FUNCTION_CLOSE, name.end())
    if at < 0:
        return None
    at += len(FUNCTION_CLOSE)
    rest = text[at:at + GAP]
    after = rest.lstrip()
    if after.startswith(CLOSE):  # the model wrote the closer of the opener it left out
        return at + len(rest) - len(after) + len(CLOSE)
    return None if not final and CLOSE.startswith(after) else at


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    text = inside(block, CLOSE)
    if not wrapped(block):
        text = BARE + (block if text is None else text)
    return FUNCTIONS.read(text, schemas) if text is not None else None


def function(tool: Tool, params: str) -> str:
    return f'{lit(f"<function={tool.name}>")} "\\n" {params} "</function>"'


def param(key: str, value: str | None) -> str:
    head = lit(f"<parameter={key}>\n")
    return f"{head} qvalue" if value is None else f'{head} {value} "\\n</parameter>\\n"'


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = call_rules(tools, function, param)
    rules.append(text_until("qvalue", "\n</parameter>\n"))
    open_, close = m(OPEN), m(CLOSE)
    many = ' ("\\n"? block)*' if parallel and tools else ""  # StepFun: none between
    rules.append(f'rest: "\\n" fn "\\n" {close}{many}')
    rules.append(f'block: {open_} "\\n" fn "\\n" {close}')
    rules.append(f"calls: {open_} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="qwen3_coder",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    blocks=BlockSyntax((OPEN, BARE), parse, end=end),
    grammar=grammar,
)
