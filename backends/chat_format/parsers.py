"""One streaming parser per output format, behind `make_parser`."""

from __future__ import annotations

from backends.base import OutputEvent, TokenEvent, Tool
from backends.chat_format.base import ChatFormat, OutputParser
from backends.chat_format.block import BlockParser, schemas_of
from backends.chat_format.families import by_name
from backends.chat_format.families.harmony import HarmonyParser
from backends.chat_format.tagged import TaggedParser


class PlainParser:
    """No markers: every piece of text is answer text."""
    thinking = False
    cut_call = False

    def feed(self, text: str) -> list[OutputEvent]:
        return [TokenEvent(text)] if text else []

    def finish(self) -> list[OutputEvent]:
        return []


def make_parser(fmt: ChatFormat, *, thinking_open: bool = False, tools_offered: bool = False,
                tools: tuple[Tool, ...] | None = None) -> OutputParser:
    """The parser of one answer. `thinking_open`: the prompt ended inside thinking (the
    template opened it, DeepSeek-R1-Distill's forced `<think>`), so the output starts there.
    `tools_offered`: tool calls are looked for only when tools were offered (otherwise a
    call-shaped text is the answer's). `tools`: the offered tools, which a call written
    without its markers (a bare JSON object) must name to count as one (None: any name),
    and whose schemas type the values of formats that write them as text."""
    family = by_name(fmt.tools)
    if fmt.harmony:
        return HarmonyParser(tools_offered=tools_offered)
    if family.blocks is not None:
        return BlockParser(family.blocks if tools_offered else None, fmt.thinking,
                           thinking_open=thinking_open, schemas=schemas_of(tools or ()),
                           drop=family.blocks.drop)
    syntax = family.json_calls if tools_offered else None
    if syntax is None and fmt.thinking is None:
        return PlainParser()
    names = frozenset(t.name for t in tools) if tools is not None else None
    return TaggedParser(syntax, fmt.thinking, thinking_open=thinking_open, tool_names=names)
