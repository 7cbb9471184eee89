"""Mistral's 2024 format: `[TOOL_CALLS][{"name": .., "arguments": {..}, "id": ..}, ..]`
(Mistral 7B v0.3, Nemo, Small 2409). Its templates accept only 9-character alphanumeric
call ids. The 2025 format (`[TOOL_CALLS]NAME[ARGS]{..}`) is backends.chat_format.families
.mistral."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.call_grammar import CallGrammar, Markers, list_grammar
from backends.chat_format.families.base import Family
from backends.chat_format.tagged import CallSyntax

OPEN = "[TOOL_CALLS]"
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def matches(template: str) -> bool:
    return OPEN in template and "[ARGS]" not in template


def nine_character_id(given: str) -> str:
    """Ember's `call_...` ids (and any client's) as 9 letters and digits, the same for the
    call and its result."""
    if len(given) == 9 and given.isalnum():
        return given
    digest = hashlib.sha256(given.encode()).digest()
    return "".join(ALPHABET[b % len(ALPHABET)] for b in digest[:9])


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    return list_grammar(tools, parallel, m, OPEN)


FAMILY = Family(
    name="mistral",
    matches=matches,
    call_markers=(OPEN,),
    json_calls=CallSyntax((OPEN,)),
    call_id=nine_character_id,
    grammar=grammar,
)
