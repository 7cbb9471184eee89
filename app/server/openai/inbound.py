"""OpenAI chat completions' fields -> Ember's request parts: the conversation (with its tool
calls and results, and the images and audio of its `image_url` and `input_audio` parts), the
tool choice and the thinking knobs OpenAI-style clients send."""

from __future__ import annotations

from app.server.generation_request import (
    ThinkingKnobs,
    arguments_text,
    named_results,
)
from app.server.media_inbound import MediaSource, Parts
from app.server.openai.schemas import (
    ChatCompletionRequest,
    ChatMessage,
    ContentPart,
    NamedToolChoice,
)
from backends.base import (
    Message,
    Thinking,
    ToolCall,
    ToolChoice,
)
from backends.errors import InvalidRequestError
from backends.media import MediaError, plain_text


def openai_messages(messages: list[ChatMessage], media: MediaSource | None = None
                    ) -> tuple[Message, ...]:
    """`media`: how images are read (the server's settings; default: inline only). Blocks
    while it decodes or fetches: the route runs it off the event loop."""
    media = media or MediaSource()
    out = []
    for i, m in enumerate(messages):
        if m.tool_calls and m.role != "assistant":
            raise InvalidRequestError(f"message {i}: only assistant messages carry tool_calls "
                                      f"(this one is {m.role!r})", f"messages[{i}].tool_calls")
        if m.role == "tool" and not (m.tool_call_id or m.name):
            raise InvalidRequestError(f"message {i}: a tool message needs the tool_call_id of "
                                      "the call it answers", f"messages[{i}].tool_call_id")
        role = "system" if m.role == "developer" else m.role
        parts = _content(m, f"messages[{i}]", media)
        parts.check_role(role, f"messages[{i}].content")
        out.append(Message(
            role=role,
            content=parts.content, media=tuple(parts.media),
            reasoning=plain_text(m.reasoning_content or m.reasoning or ""),
            tool_calls=tuple(ToolCall(id=c.id, name=c.function.name,
                                      arguments=arguments_text(c.function.arguments))
                             for c in m.tool_calls or ()),
            tool_call_id=m.tool_call_id if m.role == "tool" else None,
            name=m.name if m.role == "tool" else None))
    return named_results(tuple(out))


def _content(m: ChatMessage, where: str, media: MediaSource) -> Parts:
    """A message's text parts (joined as they are) with its images and audio where they
    stand."""
    parts = Parts()
    if isinstance(m.content, str):
        parts.text(m.content)
    for j, p in enumerate(m.content if isinstance(m.content, list) else ()):
        _part(p, f"{where}.content[{j}]", parts, media)
    return parts


def _part(p: ContentPart, here: str, parts: Parts, media: MediaSource) -> None:
    if p.type == "text":
        parts.text(p.text or "")
    elif p.type == "image_url":
        if p.image_url is None:
            raise MediaError(f"{here}.image_url: an image_url part needs its image_url "
                             '({"url": "data:image/png;base64,..."})', f"{here}.image_url")
        if isinstance(p.image_url, str):
            parts.add(media.image_url(p.image_url, f"{here}.image_url"))
        else:
            parts.add(media.image_url(p.image_url.url, f"{here}.image_url.url"))
    elif p.type == "input_audio":
        if p.input_audio is None:
            raise MediaError(f"{here}.input_audio: an input_audio part needs its "
                             'input_audio ({"data": base64, "format": "wav"})',
                             f"{here}.input_audio")
        parts.add(media.audio_base64(p.input_audio.data, f"{here}.input_audio.data",
                                     p.input_audio.format))


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
