"""OpenAI chat completions' fields -> Ember's request parts: the conversation (with its tool
calls and results), the tool choice and the thinking knobs OpenAI-style clients send."""

from __future__ import annotations

from app.server.generation_request import (
    ThinkingKnobs,
    arguments_text,
    named_results,
)
from app.server.openai.schemas import (
    ChatCompletionRequest,
    ChatMessage,
    NamedToolChoice,
)
from backends.base import (
    Message,
    Thinking,
    ToolCall,
    ToolChoice,
)
from backends.errors import InvalidRequestError


def openai_messages(messages: list[ChatMessage]) -> tuple[Message, ...]:
    out = []
    for i, m in enumerate(messages):
        if m.tool_calls and m.role != "assistant":
            raise InvalidRequestError(f"message {i}: only assistant messages carry tool_calls "
                                      f"(this one is {m.role!r})", f"messages[{i}].tool_calls")
        if m.role == "tool" and not (m.tool_call_id or m.name):
            raise InvalidRequestError(f"message {i}: a tool message needs the tool_call_id of "
                                      "the call it answers", f"messages[{i}].tool_call_id")
        out.append(Message(
            role="system" if m.role == "developer" else m.role,
            content=m.text(),
            reasoning=m.reasoning_content or m.reasoning or "",
            tool_calls=tuple(ToolCall(id=c.id, name=c.function.name,
                                      arguments=arguments_text(c.function.arguments))
                             for c in m.tool_calls or ()),
            tool_call_id=m.tool_call_id if m.role == "tool" else None,
            name=m.name if m.role == "tool" else None))
    return named_results(tuple(out))


def openai_tool_choice(choice: str | NamedToolChoice | None) -> ToolChoice:
    """OpenAI's default is auto (none without tools, which offers nothing either way)."""
    if choice is None:
        return ToolChoice("auto")
    if isinstance(choice, NamedToolChoice):
        return ToolChoice("function", choice.function.name)
    return ToolChoice(choice)  # type: ignore[arg-type]  # the schema allows only the modes


def openai_thinking(body: ChatCompletionRequest) -> Thinking:
    """reasoning_effort, reasoning.{effort,enabled} and chat_template_kwargs.{enable_thinking,
    reasoning_effort}: what OpenAI, OpenRouter, LM Studio, vLLM and mlx-lm clients send."""
    knobs = ThinkingKnobs()
    if body.reasoning_effort is not None:
        knobs.level("reasoning_effort", body.reasoning_effort)
    if body.reasoning is not None:
        if body.reasoning.effort is not None:
            knobs.level("reasoning.effort", body.reasoning.effort)
        knobs.set("reasoning.enabled", body.reasoning.enabled)
    kwargs = body.chat_template_kwargs or {}
    if "enable_thinking" in kwargs:
        if not isinstance(kwargs["enable_thinking"], bool):
            raise InvalidRequestError("chat_template_kwargs.enable_thinking must be true or "
                                      "false", "chat_template_kwargs.enable_thinking")
        knobs.set("chat_template_kwargs.enable_thinking", kwargs["enable_thinking"])
    if kwargs.get("reasoning_effort") is not None:
        knobs.level("chat_template_kwargs.reasoning_effort", kwargs["reasoning_effort"])
    return knobs.thinking()
