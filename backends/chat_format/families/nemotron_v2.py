"""NVIDIA Nemotron Nano v2 (NVIDIA-Nemotron-Nano-9B-v2, 12B-v2): the model thinks first (its
template ends the prompt with `<think>\\n`, or `<think></think>` for `/no_think`), then
answers `<TOOLCALL>[{"name": .., "arguments": {..}}, ..]</TOOLCALL>`, one list of all the
turn's calls. Its template names the format itself (`<AVAILABLE_TOOLS>[..]` then "use the
following format: <TOOLCALL>[..]"), and renders earlier calls the same way. Nemotron 3 Nano
writes Qwen3-Coder's XML calls instead, and its template names no `<TOOLCALL>`."""

from __future__ import annotations

from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.call_grammar import CallGrammar, Markers, list_grammar
from backends.chat_format.families.base import THINK, Family
from backends.chat_format.tagged import CallSyntax

OPEN, CLOSE = "<TOOLCALL>", "</TOOLCALL>"


def matches(template: str) -> bool:
    return OPEN in template and CLOSE in template


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    return list_grammar(tools, parallel, m, OPEN, CLOSE)


FAMILY = Family(
    name="nemotron_v2",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    thinking=THINK,
    json_calls=CallSyntax((OPEN,), CLOSE),
    grammar=grammar,
)
