"""One parser per output format (placeholder: plain text is all answer)."""

from __future__ import annotations

from backends.base import OutputEvent, TokenEvent
from backends.chat_format.base import ChatFormat, OutputParser


class PlainParser:
    """No markers: every piece of text is answer text."""
    thinking = False
    cut_call = False

    def feed(self, text: str) -> list[OutputEvent]:
        return [TokenEvent(text)] if text else []

    def finish(self) -> list[OutputEvent]:
        return []


def make_parser(fmt: ChatFormat, *, thinking_open: bool = False,
                tools_offered: bool = False) -> OutputParser:
    """The parser of one answer. `thinking_open`: the prompt ended inside thinking (the
    template opened it, DeepSeek-R1-Distill's forced `<think>`), so the output starts there.
    `tools_offered`: tool calls are looked for only when tools were offered."""
    return PlainParser()
