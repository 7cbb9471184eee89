"""What a model's output looks like, and reading it: thinking, answer text and tool calls.

A model family writes tool calls and thinking its own way (Hermes `<tool_call>`, Llama 3
JSON, Mistral `[TOOL_CALLS]`, harmony channels, `<think>`); docs/wire-formats.md C.5 has
the table. `detect_format` reads the chat template (never the model's name) and says which
way; `make_parser` gives one streaming parser for it, which every backend feeds the answer's
text as it is generated, and which turns it into TokenEvent (answer), ReasoningEvent and
ToolCallEvent. Non-streaming answers are the sum of the same events (backends.job), so the
two cannot differ.
"""

from __future__ import annotations

from backends.chat_format.base import ChatFormat, OutputParser, ThinkingMarkers
from backends.chat_format.detect import detect_format
from backends.chat_format.parsers import make_parser

__all__ = ["ChatFormat", "OutputParser", "ThinkingMarkers", "detect_format", "make_parser"]
