"""Ollama's chat fields -> Ember's request parts: the conversation and `think`."""

from __future__ import annotations

from app.server.generation_request import (
    ThinkingKnobs,
    arguments_text,
    named_results,
)
from app.server.ollama.schemas import OllamaMessage, Think
from backends.base import (
    Message,
    Thinking,
    ToolCall,
)
from backends.errors import InvalidRequestError


def ollama_messages(messages: list[OllamaMessage]) -> tuple[Message, ...]:
    out = []
    for i, m in enumerate(messages):
        if m.tool_calls and m.role != "assistant":
            raise InvalidRequestError(f"message {i}: only assistant messages carry tool_calls "
                                      f"(this one is {m.role!r})", f"messages[{i}].tool_calls")
        out.append(Message(
            role=m.role, content=m.content or "", reasoning=m.thinking or "",
            tool_calls=tuple(ToolCall(id=c.id or "", name=c.function.name,
                                      arguments=arguments_text(c.function.arguments))
                             for c in m.tool_calls or ()),
            tool_call_id=(m.tool_call_id or None) if m.role == "tool" else None,
            name=m.tool_name if m.role == "tool" else None))
    return named_results(tuple(out))


def ollama_thinking(think: Think | None) -> Thinking:
    """Ollama's `think`: true, false, or a level (which also turns thinking on)."""
    knobs = ThinkingKnobs()
    if isinstance(think, bool):
        knobs.set("think", think)
    elif think is not None:
        knobs.level("think", think)
    return knobs.thinking()
