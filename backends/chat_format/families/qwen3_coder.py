"""Qwen3-Coder's XML calls, one block per call:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Each value is raw text between newlines (a string parameter as it is, any other as JSON).
Qwen3-Coder, Qwen3.5 (thinking in `<think>`, which its prompt opens), NVIDIA Nemotron 3 Nano
(the same, its prompt opening `<think>` too) and StepFun-3.5-Flash write it; their templates
name `<tool_call>`, `<function=` and `<parameter=`. Seed-OSS writes the same function inside
its own `<seed:tool_call>` (backends.chat_format.families.seed_oss).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.block import (
    BlockSyntax,
    ParsedCall,
    Schemas,
    parameter_schema,
    typed_value,
)
from backends.chat_format.call_grammar import CallGrammar, Markers, lit
from backends.chat_format.families.base import Family, mentions
from backends.chat_format.xml_calls import (
    Values,
    call_rules,
    ends_after,
    one_newline_off,
    text_until,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FUNCTION = re.compile(r"\s*<function=([^>\n]{1,200})>")
PARAMETER = re.compile(r"\s*<parameter=([^>\n]{1,200})>")
FUNCTION_END = re.compile(r"\s*</function>")
VALUE = Values("</parameter>", ("<parameter=", "</function>"))


def matches(template: str) -> bool:
    return mentions(template, OPEN, "<function=", "<parameter=")


def read_functions(text: str, schemas: Schemas, trim: bool = True) -> list[ParsedCall] | None:
    """The `<function=NAME><parameter=KEY>VALUE</parameter>..</function>` calls that are all
    of `text` (whitespace aside), or None. `trim`: a value's newline each side is markup."""
    calls: list[ParsedCall] = []
    at = 0
    while (head := FUNCTION.match(text, at)) is not None:
        name, at = head[1].strip(), head.end()
        arguments: dict = {}
        while (param := PARAMETER.match(text, at)) is not None:
            read = VALUE.read(text, param.end())
            if read is None:
                return None
            value, at = read
            key = param[1].strip()
            value = one_newline_off(value) if trim else value
            arguments[key] = typed_value(value, parameter_schema(schemas, name, key))
        end = FUNCTION_END.match(text, at)
        if end is None or not name:
            return None
        at = end.end()
        calls.append(ParsedCall(name, arguments))
    return calls if calls and not text[at:].strip() else None


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    body = block.rstrip()
    if not body.endswith(CLOSE):
        return None
    return read_functions(body[:-len(CLOSE)], schemas)


def param(key: str, value: str | None) -> str:
    head = lit(f"<parameter={key}>\n")
    return f"{head} qvalue" if value is None else f'{head} {value} "\\n</parameter>\\n"'


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = call_rules(tools, lambda t, params: f'{lit(f"<function={t.name}>")} "\\n" '
                       f'{params} "</function>"', param)
    rules.append(text_until("qvalue", "\n</parameter>\n"))
    open_, close = m(OPEN), m(CLOSE)
    many = ' ("\\n" block)*' if parallel and tools else ""
    rules.append(f'rest: "\\n" fn "\\n" {close}{many}')
    rules.append(f'block: {open_} "\\n" fn "\\n" {close}')
    rules.append(f"calls: {open_} rest")
    return CallGrammar(rules, OPEN)


FAMILY = Family(
    name="qwen3_coder",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    blocks=BlockSyntax((OPEN,), parse, end=ends_after("</function>", CLOSE)),
    grammar=grammar,
)
