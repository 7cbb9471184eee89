"""Ollama's chat fields -> Ember's request parts: the conversation (with its messages'
`images`) and `think`."""

from __future__ import annotations

from app.server.generation_request import (
    ThinkingKnobs,
    arguments_text,
    named_results,
)
from app.server.media_inbound import MEDIA_ROLES, MediaSource, with_markers
from app.server.ollama.schemas import OllamaMessage, Think
from backends.base import (
    Message,
    Thinking,
    ToolCall,
)
from backends.errors import InvalidRequestError
from backends.media import Media, MediaError, plain_text


def ollama_images(images: list[str] | None, where: str, media: MediaSource) -> list[Media]:
    """Ollama's `images`: base64 image bytes, each decoded (a problem names its index)."""
    return [media.image_base64(data, f"{where}[{k}]") for k, data in enumerate(images or ())]


def ollama_messages(messages: list[OllamaMessage], media: MediaSource | None = None
                    ) -> tuple[Message, ...]:
    """A message's images go before its content, a marker each, as Ollama places them.
    `media`: how they are read (default: as the server does); it blocks while it decodes."""
    media = media or MediaSource()
    out = []
    for i, m in enumerate(messages):
        if m.tool_calls and m.role != "assistant":
            raise InvalidRequestError(f"message {i}: only assistant messages carry tool_calls "
                                      f"(this one is {m.role!r})", f"messages[{i}].tool_calls")
        images = ollama_images(m.images, f"messages[{i}].images", media)
        if images and m.role not in MEDIA_ROLES:
            raise MediaError(f"messages[{i}].images: images go in user turns (or tool "
                             f"results), not in a {m.role} turn", f"messages[{i}].images")
        out.append(Message(
            role=m.role, content=with_markers(m.content or "", images), media=tuple(images),
            reasoning=plain_text(m.thinking or ""),
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
