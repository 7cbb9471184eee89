"""Mistral's 2025 format: each call is `[TOOL_CALLS]NAME[ARGS]{..}`, several in a row, with
the call's id between in Mistral Small 3.2 (`[TOOL_CALLS]NAME[CALL_ID]a1b2c3d4e[ARGS]{..}`),
after any answer text; thinking in `[THINK]..[/THINK]` where the template names it.

    [THINK]The user wants Paris.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{"city": ..}
    [TOOL_CALLS]get_time[ARGS]{}

Mistral Small 3.2 (2506), Magistral, Devstral Small (2507), Ministral 3 (2512, reasoning),
Mistral Large 3. The 2024 JSON list (`[TOOL_CALLS][{..}]`) is families.mistral_list; this
one's templates write `[ARGS]`. Mistral Small 3.2's template insists on 9-character
alphanumeric ids; Ministral's takes the thinking as a content block of type "thinking"."""

from __future__ import annotations

import re
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.block import BlockSyntax, ParsedCall, Schemas
from backends.chat_format.call_grammar import CallGrammar, Markers, args_rule, lit
from backends.chat_format.families.base import Family
from backends.chat_format.families.mistral_list import nine_character_id
from backends.chat_format.json_extent import JsonScan, json_object

OPEN, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
THINK = ThinkingMarkers("[THINK]", "[/THINK]")
HEAD = re.compile(r"\s*([\w.\-]{1,256})(?:\[CALL_ID\]\s*([A-Za-z0-9_\-]{1,64}))?\[ARGS\]")
# a head cut short: a name, maybe an id, and the start of a marker
PARTIAL = re.compile(r"\s*[\w.\-]{0,256}(?:\[CALL_ID\]\s*[A-Za-z0-9_\-]{0,64})?")


def matches(template: str) -> bool:
    return OPEN in template and ARGS in template


class CallEnd:
    """One call's end: just past its JSON object. A head that cannot become `NAME[ARGS]`,
    or arguments that are not an object, end it where they go wrong (shown as text)."""

    def __init__(self) -> None:
        self.value: JsonScan | None = None
        self.pos = 0

    def __call__(self, text: str, final: bool) -> int | None:
        if self.value is None:
            at = text.find(ARGS)
            if at < 0:
                partial = PARTIAL.match(text)
                rest = text[partial.end():] if partial is not None else text
                if rest and not (ARGS.startswith(rest) or CALL_ID.startswith(rest)):
                    return len(text)
                return None
            if HEAD.match(text[:at + len(ARGS)]) is None:
                return at + len(ARGS)
            self.value, self.pos = JsonScan(), at + len(ARGS)
        self.pos = self.value.advance(text, self.pos)
        return self.pos if self.value.done or self.value.bad else None


def parse(block: str, schemas: Schemas) -> list[ParsedCall] | None:
    head = HEAD.match(block)
    if head is None:
        return None
    arguments = json_object(block[head.end():])
    return None if arguments is None else [ParsedCall(head.group(1), arguments)]


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    rules = [f"call_{i}: {lit(t.name)} call_id? {m(ARGS)} {args_rule(t)}"
             for i, t in enumerate(tools)]
    rules.append(f"call_id: {m(CALL_ID)} /[a-zA-Z0-9]{{9}}/")
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    rules.append("rest: call" + (f" ({m(OPEN)} call)*" if parallel and tools else ""))
    rules.append(f"calls: {m(OPEN)} rest")
    return CallGrammar(rules, OPEN)


def thinking_blocks(dicts: list[dict], template: str) -> list[dict]:
    """An assistant turn's thinking as the content block Ministral's template renders
    (`[THINK]..[/THINK]`); the family's other templates have no place for it."""
    if "'thinking'" not in template:
        return dicts
    out = []
    for d in dicts:
        thought = d.get("reasoning_content") if d["role"] == "assistant" else None
        if thought:
            d = {k: v for k, v in d.items() if k not in ("reasoning_content", "thinking")}
            d["content"] = [{"type": "thinking", "thinking": thought},
                            {"type": "text", "text": d.get("content") or ""}]
        out.append(d)
    return out


FAMILY = Family(
    name="mistral_args",
    matches=matches,
    call_markers=(OPEN, ARGS, CALL_ID),
    thinking=THINK,
    blocks=BlockSyntax((OPEN,), parse, block_end=CallEnd),
    call_id=nine_character_id,
    shape_turns=thinking_blocks,
    grammar=grammar,
)
