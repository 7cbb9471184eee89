"""DeepSeek V3.1: calls in one block after any answer text, each a name and its JSON
arguments, thinking in `<think>` (the template opens it when `thinking` is on):

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": ..}
    <｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜>
    <｜tool▁calls▁end｜>

(on three lines here; the model writes no newlines: DeepSeek's wording says to chain calls
"without separators"). Its template renders earlier calls and results but never `tools`:
Ember writes them into the system prompt in the words of the V3.1 model card (`tools_prompt`).

The parser here reads R1's shape too (`function<｜tool▁sep｜>NAME\\n```json\\n{..}\\n```` per
call, families.deepseek_r1, whose template renders `tools`), whichever the model writes;
each family's grammar writes its own shape. DeepSeek V3.2 and V4 write DSML tags instead;
R1-Distill's templates render past calls in R1's shape but never `tools` (the distilled
models were not trained to call tools), so they stay generic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, args_rule, lit
from backends.chat_format.families.base import Family
from backends.chat_format.json_extent import JsonCallsEnd, JsonScan, json_object

OPEN, CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, SEP, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
FENCE = "```json"
MARKERS = (OPEN, CLOSE, CALL, SEP, CALL_END)
_NAME = r"([\w.\-]{1,256})"
# R1's head: `function<sep>NAME` and a ```json fence; V3.1's: `NAME<sep>`
R1_HEAD = re.compile(rf"\s*{CALL}\s*(?:\w+)?\s*{SEP}\s*{_NAME}\s*```(?:json)?\s*")
V3_HEAD = re.compile(rf"\s*{CALL}\s*{_NAME}\s*{SEP}\s*")
TAIL = re.compile(rf"\s*(?:```)?\s*{CALL_END}")
# the template writes a call's arguments right after the separator
V3_SHAPE = re.compile(r"tool▁sep｜>'\s*\+\s*\w+(?:\['function'\]\['arguments'\]"
                      r"|\.function\.arguments)")


def matches(template: str) -> bool:
    return OPEN in template and V3_SHAPE.search(template) is not None \
        and FENCE not in template


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    """The calls of a block (up to and with its closer, which the end rule includes)."""
    text = block[:-len(CLOSE)] if block.endswith(CLOSE) else block
    calls: list[ParsedCall] = []
    pos = 0
    while True:
        head = R1_HEAD.match(text, pos) or V3_HEAD.match(text, pos)
        if head is None:
            break
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
    return JsonCallsEnd((SEP, FENCE), CLOSE)


def tools_prompt(tools: Sequence[Tool]) -> str:
    """The tools as DeepSeek's V3.1 model card writes them into the system prompt."""
    listed = "".join(f"\n### {t.name}\nDescription: {t.description}\n\n"
                     f"Parameters: {json.dumps(t.parameters, ensure_ascii=False)}\n"
                     for t in tools)
    return ("## Tools\nYou have access to the following tools:\n" + listed +
            "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
            f"{OPEN}{CALL}tool_call_name{SEP}tool_call_arguments{CALL_END}"
            "{additional_tool_calls}" + CLOSE + "\n\n"
            "Where:\n"
            "- `tool_call_name` must be an exact match to one of the available tools\n"
            "- `tool_call_arguments` must be valid JSON that strictly follows the tool's "
            "Parameters Schema\n"
            "- For multiple tool calls, chain them directly without separators or spaces")


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = [f"call_{i}: {m(CALL)} {lit(t.name)} {m(SEP)} {args_rule(t)} {m(CALL_END)}"
             for i, t in enumerate(tools)]
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    rules.append("rest: call" + (" call*" if parallel and tools else "") + f" {m(CLOSE)}")
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


SYNTAX = BlockSyntax((OPEN,), parse, block_end=block_end)

FAMILY = Family(
    name="deepseek_v3",
    matches=matches,
    call_markers=MARKERS,
    blocks=SYNTAX,
    tools_prompt=tools_prompt,
    grammar=grammar,
)
