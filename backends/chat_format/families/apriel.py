"""ServiceNow Apriel (Apriel-1.5-15b-Thinker, Apriel-1.6-15b-Thinker):
`<tool_calls>[{"name": .., "arguments": {..}}, ..]</tool_calls>`, the turn's calls as one
JSON list. Apriel 1.6's prompt opens the reasoning with "Here are my reasoning steps:", and
the model ends it with `[BEGIN FINAL RESPONSE]`, then answers or calls. Apriel 1.5 reasons
with no opener at all (its prompt only asks for the marker), so its reasoning stays in the
answer, as llama.cpp leaves it; the marker itself is dropped. Their templates render tools,
earlier calls and results themselves."""

from __future__ import annotations

from collections.abc import Sequence

from backends.base import Tool
from backends.chat_format.base import ThinkingMarkers
from backends.chat_format.call_grammar import CallGrammar, Markers, list_grammar
from backends.chat_format.families.base import Family
from backends.chat_format.tagged import CallSyntax

OPEN, CLOSE = "<tool_calls>", "</tool_calls>"
THINKING = ThinkingMarkers("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]")


def matches(template: str) -> bool:
    return f"{OPEN}[" in template and THINKING.close in template


def grammar(tools: Sequence[Tool], parallel: bool, m: Markers) -> CallGrammar:
    return list_grammar(tools, parallel, m, OPEN, CLOSE)


FAMILY = Family(
    name="apriel",
    matches=matches,
    call_markers=(OPEN, CLOSE),
    thinking=THINKING,
    json_calls=CallSyntax((OPEN,), CLOSE),
    grammar=grammar,
)
