"""Which ChatFormat a chat template has: its family (backends.chat_format.families, read
from the template's own text), the thinking markers and switches the template names, and
the marker texts a backend must show as text for the parser to see them."""

from __future__ import annotations

from backends.chat_format.base import ChatFormat
from backends.chat_format.families import THINK, family_of


def detect_format(template: str | None) -> ChatFormat:
    if not template:
        return ChatFormat()
    family = family_of(template)
    thinking = family.thinking
    if thinking is None and not family.harmony and ("<think>" in template
                                                    or "</think>" in template):
        thinking = THINK
    if thinking is not None and not family.builds_thinking and thinking.open not in template \
            and thinking.close not in template:
        thinking = None  # the family can think, this template of it does not
    markers = family.call_markers
    if thinking is not None:
        markers += (thinking.open, thinking.close)
    return ChatFormat(
        tools=family.name,
        native_tools=family.native_tools,
        thinking=thinking,
        harmony=family.harmony,
        thinking_toggle="enable_thinking" in template or (
            family.thinking_variable is not None and family.thinking_variable in template),
        thinking_effort="reasoning_effort" in template,
        thinking_budget="thinking_budget" in template,
        special_markers=markers,
    )
