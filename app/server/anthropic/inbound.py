"""Anthropic's Messages fields -> Ember's request parts: the system prompt and the
conversation (text, image, thinking, tool_use and tool_result blocks), the tools and tool
choice, and `thinking`."""

from __future__ import annotations

import json

from app.server.anthropic.schemas import (
    AnthropicToolChoice,
    ContentBlockIn,
    DocumentBlock,
    ImageBlock,
    MessageIn,
    OutputConfig,
    RedactedThinkingBlockIn,
    TextBlock,
    ThinkingBlockIn,
    ThinkingConfig,
    ThinkingDisabled,
    ThinkingEnabled,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolIn,
    ToolResultBlockIn,
    ToolUseBlockIn,
)
from app.server.generation_request import (
    ThinkingKnobs,
)
from app.server.media_inbound import MediaSource, Parts
from backends.base import (
    Message,
    ReasoningEffort,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
)
from backends.errors import InvalidRequestError
from backends.media import Media, MediaError, plain_text

BLOCK_SEPARATOR = "\n\n"  # between the text blocks of one Anthropic turn (or system)


def _unsupported(block: DocumentBlock, where: str) -> InvalidRequestError:
    return InvalidRequestError(f"{where}: {block.type} blocks are not supported yet: Ember "
                               "reads no documents; send their content as text blocks", where)


def _image(block: ImageBlock, where: str, media: MediaSource) -> Media:
    """An image block's source: base64 (its media_type one Ember reads), or a URL (fetched
    only when the server is started to); the Files API's file_id is refused."""
    source = block.source
    if source is None:
        raise MediaError(f"{where}.source: an image block needs its source ({{\"type\": "
                         "\"base64\", \"media_type\": \"image/png\", \"data\": ...})",
                         f"{where}.source")
    here = f"{where}.source"
    if source.type == "base64":
        if source.data is None:
            raise MediaError(f"{here}.data: a base64 image source needs its data",
                             f"{here}.data")
        return media.image_base64(source.data, f"{here}.data", source.media_type)
    if source.type == "url":
        if source.url is None:
            raise MediaError(f"{here}.url: a url image source needs its url", f"{here}.url")
        return media.image_url(source.url, f"{here}.url")
    raise MediaError(f"{here}.type: image sources of type {source.type[:40]!r} are not "
                     "supported (Ember takes base64 and url)", f"{here}.type")


def anthropic_system(system: str | list[TextBlock] | None) -> tuple[Message, ...]:
    """Anthropic's top-level `system`, as the conversation's system message."""
    text = plain_text(system) if isinstance(system, str) else BLOCK_SEPARATOR.join(
        plain_text(b.text) for b in system or ())
    return (Message("system", text),) if text else ()


def anthropic_messages(system: str | list[TextBlock] | None, messages: list[MessageIn],
                       media: MediaSource | None = None) -> tuple[Message, ...]:
    """Anthropic's conversation as Ember's: the system prompt first; an assistant turn's text,
    thinking (kept as its reasoning; redacted thinking cannot be read and is dropped) and
    tool_use blocks (ToolCalls, `input` as JSON text) become one assistant message; a user
    turn's tool_result blocks become `tool` messages, in order, each answering a tool_use of
    the assistant turn just before it (as Anthropic requires), then its text blocks one user
    message. A result marked `is_error` reads "Error: ..." (a chat template has no other way
    to tell the model). Image blocks of a user turn (and of a tool result) become its media,
    a marker where each stands (`media`: how they are read, the server's settings; default:
    inline only; it blocks while it decodes or fetches). Documents are refused."""
    media = media or MediaSource()
    out = list(anthropic_system(system))
    offered: dict[str, str] = {}  # the tool_use ids (-> names) of the last assistant turn
    for i, m in enumerate(messages):
        blocks: list[ContentBlockIn] = [TextBlock(type="text", text=m.content)] \
            if isinstance(m.content, str) else m.content
        if not blocks:
            raise InvalidRequestError(f"messages[{i}].content: a turn needs at least one "
                                      "content block", f"messages[{i}].content")
        if m.role == "assistant":
            out.append(_assistant_turn(blocks, f"messages[{i}]"))
            offered = {c.id: c.name for c in out[-1].tool_calls}
        elif m.role == "system":
            out.append(_system_turn(blocks, f"messages[{i}]"))
        else:
            out += _user_turn(blocks, f"messages[{i}]", offered, media)
            offered = {}
    return tuple(out)


def _assistant_turn(blocks: list[ContentBlockIn], where: str) -> Message:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for j, b in enumerate(blocks):
        if isinstance(b, TextBlock):
            texts.append(plain_text(b.text))
        elif isinstance(b, ThinkingBlockIn):
            thoughts.append(plain_text(b.thinking))
        elif isinstance(b, ToolUseBlockIn):
            calls.append(ToolCall(id=b.id, name=b.name,
                                  arguments=json.dumps(b.input, ensure_ascii=False)))
        elif isinstance(b, DocumentBlock):
            raise _unsupported(b, f"{where}.content[{j}]")
        elif isinstance(b, ImageBlock):
            raise MediaError(f"{where}.content[{j}]: images go in user turns (or tool "
                             "results), not in an assistant turn", f"{where}.content[{j}]")
        elif not isinstance(b, RedactedThinkingBlockIn):
            raise InvalidRequestError(f"{where}.content[{j}]: an assistant turn cannot carry a "
                                      f"{b.type} block (tool results go in the user turn "
                                      "after the call)", f"{where}.content[{j}].type")
    return Message("assistant", BLOCK_SEPARATOR.join(texts),
                   reasoning=BLOCK_SEPARATOR.join(thoughts), tool_calls=tuple(calls))


def _system_turn(blocks: list[ContentBlockIn], where: str) -> Message:
    """A system turn inside the conversation: its text blocks, as a system message where it
    stands (ChatTemplate.render folds it into a user turn for templates that refuse one)."""
    texts = []
    for j, b in enumerate(blocks):
        if not isinstance(b, TextBlock):
            raise InvalidRequestError(f"{where}.content[{j}]: a system turn carries text blocks "
                                      f"only, not {b.type}", f"{where}.content[{j}].type")
        texts.append(plain_text(b.text))
    return Message("system", BLOCK_SEPARATOR.join(texts))


def _user_turn(blocks: list[ContentBlockIn], where: str,
               offered: dict[str, str], media: MediaSource) -> list[Message]:
    parts = Parts(BLOCK_SEPARATOR)
    results: list[Message] = []
    for j, b in enumerate(blocks):
        here = f"{where}.content[{j}]"
        if isinstance(b, TextBlock):
            parts.text(b.text)
        elif isinstance(b, ImageBlock):
            parts.add(_image(b, here, media))
        elif isinstance(b, ToolResultBlockIn):
            if b.tool_use_id not in offered:
                made = ", ".join(offered) or "none"
                raise InvalidRequestError(
                    f"{here}.tool_use_id: a tool_result for {b.tool_use_id[:80]!r}, but the "
                    f"assistant turn just before it made no tool_use with that id (it made: "
                    f"{made})", f"{here}.tool_use_id")
            results.append(_result(b, here, media).message(
                "tool", here, tool_call_id=b.tool_use_id, name=offered[b.tool_use_id]))
        elif isinstance(b, DocumentBlock):
            raise _unsupported(b, here)
        else:
            raise InvalidRequestError(f"{here}: a user turn cannot carry a {b.type} block "
                                      "(only the assistant's turns do)", f"{here}.type")
    text = [parts.message("user", where)] if parts.pieces else []
    return results + text


def _result(block: ToolResultBlockIn, where: str, media: MediaSource) -> Parts:
    """A tool result's text and images (a screenshot a computer-use tool took); an error
    reads "Error: ..." (a chat template has no other way to tell the model)."""
    parts = Parts(BLOCK_SEPARATOR)
    if block.content is None or isinstance(block.content, str):
        parts.text(block.content or "")
    else:
        for k, part in enumerate(block.content):
            if isinstance(part, TextBlock):
                parts.text(part.text)
            elif isinstance(part, ImageBlock):
                parts.add(_image(part, f"{where}.content[{k}]", media))
            else:
                raise _unsupported(part, f"{where}.content[{k}]")
    if block.is_error:
        parts.pieces[:1] = ["Error: " + "".join(parts.pieces[:1])]
    return parts


def anthropic_server_tools(tools: list[ToolIn] | None) -> tuple[str, ...]:
    """Anthropic's server tools (web search, code execution, ...: `type` other than custom),
    as `type:name`: they run on Anthropic's servers, so Ember leaves them out of what the
    model sees and names them (the response's Ember-Tools-Left-Out header)."""
    return tuple(f"{t.type}:{t.name}" for t in tools or () if t.runs_on_anthropic)


def anthropic_tools(tools: list[ToolIn] | None) -> tuple[Tool, ...]:
    """Anthropic's custom tools (name, description, input_schema); its server tools are left
    out (anthropic_server_tools)."""
    out = []
    for i, t in enumerate(tools or ()):
        if t.runs_on_anthropic:
            continue
        if t.input_schema is None:
            raise InvalidRequestError(f"tools[{i}].input_schema: the tool {t.name[:60]!r} "
                                      "needs its input_schema (a JSON schema of an object)",
                                      f"tools[{i}].input_schema")
        out.append(Tool(name=t.name, description=t.description or "",
                        parameters=t.input_schema))
    return tuple(out)


def anthropic_tool_choice(choice: AnthropicToolChoice | None, offered: tuple[Tool, ...],
                          server_tools: frozenset[str] = frozenset(), *,
                          more_tools: bool = False) -> tuple[ToolChoice, bool]:
    """The tool choice, and whether parallel calls are allowed (`disable_parallel_tool_use`
    false, Anthropic's default). auto is the default; any is OpenAI's required.
    `more_tools`: the server adds tools of its own (`ember serve --mcp`), so any or a named
    tool may be met without the request's (GenerationRequest.validate checks it then)."""
    if choice is None:
        return ToolChoice("auto"), True
    if isinstance(choice, ToolChoiceNone):
        return ToolChoice("none"), True
    if isinstance(choice, ToolChoiceAny | ToolChoiceTool) and not offered and not more_tools:
        raise InvalidRequestError(f"tool_choice {choice.type!r} needs tools to choose from: "
                                  "offer some in `tools`", "tool_choice")
    parallel = not choice.disable_parallel_tool_use
    if isinstance(choice, ToolChoiceTool):
        if choice.name in server_tools:
            raise InvalidRequestError(
                f"tool_choice forces {choice.name[:60]!r}, one of Anthropic's server tools, "
                "which run on Anthropic's servers and Ember cannot run: force a custom tool, "
                "or use auto", "tool_choice.name")
        return ToolChoice("function", choice.name), parallel
    return ToolChoice("required" if isinstance(choice, ToolChoiceAny) else "auto"), parallel


ANTHROPIC_EFFORTS: dict[str, ReasoningEffort] = {
    "low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def anthropic_thinking(config: ThinkingConfig | None, max_tokens: int | None,
                       output: OutputConfig | None = None) -> Thinking:
    """`thinking`: enabled turns it on, disabled off, adaptive (and none) keeps the model's
    own default; `output_config.effort` is the effort (for templates that take one), without
    switching thinking on or off. `budget_tokens` is checked as Anthropic checks it (at
    least 1024, by the schema, and below max_tokens), but Ember cannot hold a model to it:
    no backend stops the thinking after a number of tokens, so only max_tokens bounds it
    (thinking tokens count toward max_tokens, as on Anthropic's API)."""
    knobs = ThinkingKnobs()
    if output is not None and output.effort is not None:
        knobs.set("output_config.effort", None, ANTHROPIC_EFFORTS[output.effort])
    if isinstance(config, ThinkingEnabled):
        if max_tokens is not None and config.budget_tokens >= max_tokens:
            raise InvalidRequestError(
                f"thinking.budget_tokens ({config.budget_tokens}) must be less than max_tokens "
                f"({max_tokens}): the thinking is part of the answer's tokens",
                "thinking.budget_tokens")
        knobs.set("thinking.type", True)
    elif isinstance(config, ThinkingDisabled):
        knobs.set("thinking.type", False)
    return knobs.thinking()
