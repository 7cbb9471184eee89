"""Which ChatFormat a chat template has (placeholder: every template is plain text)."""

from __future__ import annotations

from backends.chat_format.base import ChatFormat


def detect_format(template: str | None) -> ChatFormat:
    return ChatFormat()
