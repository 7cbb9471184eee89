"""The format descriptor and the parser interface every output format implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from backends.base import OutputEvent

# How a model writes tool calls: the name of its family (backends.chat_format.families, one
# module each: hermes, llama3, mistral, phi4, harmony, ...), or
#   none     no chat template (a base model): no tools
#   generic  a template without tool support (Gemma 3): Ember describes the tools and the
#            call format in the system prompt itself
#   unknown  a template that renders tools in a way no family knows: plain chat only
ToolFormat = str


@dataclass(frozen=True)
class ThinkingMarkers:
    open: str  # "<think>"
    close: str  # "</think>"


@dataclass(frozen=True)
class ChatFormat:
    """What a chat template says about its model's output."""
    tools: ToolFormat = "none"
    # the template renders `tools` itself (else Ember puts them in the system prompt)
    native_tools: bool = False
    thinking: ThinkingMarkers | None = None  # None: the model does not think in marked text
    harmony: bool = False  # gpt-oss: thinking and calls are harmony channels, not markers
    thinking_toggle: bool = False  # the template takes enable_thinking (Qwen3, SmolLM3)
    thinking_effort: bool = False  # the template takes reasoning_effort (gpt-oss)
    thinking_budget: bool = False  # the template takes thinking_budget (Seed-OSS: 0 is off)
    # marker texts that are special (control) tokens in the vocabulary, which a backend must
    # detokenize as text for the parser to see them (harmony's <|channel|>, <|message|>, ...)
    special_markers: tuple[str, ...] = ()


class OutputParser(Protocol):
    """Text in, events out, in order. `feed` takes each new piece of the generated text (any
    split: a marker may arrive over several pieces, which the parser holds back until it
    knows); `finish` ends the output and flushes what was held back. A tool call the output
    cut off is never reported whole: `cut_call` then says so."""

    def feed(self, text: str) -> list[OutputEvent]: ...
    def finish(self) -> list[OutputEvent]: ...
    @property
    def thinking(self) -> bool: ...  # the text fed last was inside thinking
    @property
    def cut_call(self) -> bool: ...  # finish() found a call not ended
