"""The Responses API's fields -> Ember's request parts: its input items as a conversation,
the tool choice, `text.format` and `reasoning`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from app.server.generation_request import (
    ThinkingKnobs,
    named_results,
)
from app.server.media_inbound import MediaSource, Parts
from app.server.openai.schemas import (
    ToolChoiceMode,
)
from app.server.responses.schemas import (
    AudioPart,
    FormatJsonObject,
    FormatJsonSchema,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    ImagePart,
    InputItem,
    McpCallItem,
    MessageItem,
    ReasoningConfig,
    ReasoningItem,
    TextConfig,
    TextParts,
)
from backends.base import (
    Message,
    Thinking,
    ToolCall,
    ToolChoice,
)
from backends.errors import InvalidRequestError
from backends.media import MediaError, plain_text


@dataclass
class _AssistantTurn:
    """Consecutive reasoning, assistant message and function_call items: one assistant turn,
    as one answer of the model produced them."""
    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def messages(self) -> list[Message]:
        """The turn, unless it has nothing the model can read (OpenAI's reasoning items
        carry only encrypted_content, and an empty turn would read as an empty answer)."""
        if not (self.text or self.reasoning or self.calls):
            return []
        return [Message("assistant", "".join(self.text), reasoning="\n".join(self.reasoning),
                        tool_calls=tuple(self.calls))]


def _parts(content: str | TextParts, where: str, media: MediaSource) -> Parts:
    """A message's or a function output's text, with its images and audio where they
    stand."""
    parts = Parts()
    if isinstance(content, str):
        parts.text(content)
        return parts
    for j, p in enumerate(content):
        here = f"{where}[{j}]"
        if isinstance(p, ImagePart):
            if p.image_url is None:
                refusal = ("file_id images (OpenAI's Files API) are not supported: send the "
                           "image as image_url, a base64 data URL") if p.file_id is not None \
                    else "an input_image part needs its image_url (a base64 data URL)"
                raise MediaError(f"{here}: {refusal}", f"{here}.file_id"
                                 if p.file_id is not None else f"{here}.image_url")
            parts.add(media.image_url(p.image_url, f"{here}.image_url"))
        elif isinstance(p, AudioPart):
            parts.add(media.audio_base64(p.input_audio.data, f"{here}.input_audio.data",
                                         p.input_audio.format))
        else:
            parts.text(p.text)
    return parts


def _text(content: str | TextParts, where: str, role: str) -> str:
    """Text where no image may stand (an assistant's own message)."""
    parts = _parts(content, where, MediaSource())
    parts.check_role(role, where)
    return parts.content


def responses_messages(items: str | list[InputItem], earlier: tuple[Message, ...] = (), *,
                       from_model: bool = False,
                       visible: Callable[[str | None, str], str] | None = None,
                       media: MediaSource | None = None) -> tuple[Message, ...]:
    """The Responses API's input after the conversation `earlier` (previous_response_id's):
    a string is a user turn; runs of reasoning, assistant message and function_call items
    become one assistant turn (the reasoning its thinking, the calls its tool_calls);
    function_call_output items become tool turns, each answering a call made before it.
    `from_model`: the items are a response's own output, kept as they are (a call whose
    arguments are not a JSON object is refused when a later request carries it).
    `visible`: the name the model was offered a function by, from its namespace and name
    (app.server.responses.tools.OfferedTools.visible). An mcp_call item (a call
    `ember serve --mcp` ran) ends its assistant turn with that call, and its result (output,
    or error) is the tool turn after it. `media`: how images are read (the server's
    settings; default: inline only); it blocks while it decodes or fetches."""
    media = media or MediaSource()
    if isinstance(items, str):
        return named_results((*earlier, Message("user", plain_text(items))))
    out = list(earlier)
    calls = {c.id for m in earlier for c in m.tool_calls}
    turn: _AssistantTurn | None = None
    for i, item in enumerate(items):
        if isinstance(item, ReasoningItem | FunctionCallItem) or (
                isinstance(item, MessageItem) and item.role == "assistant"):
            turn = turn or _AssistantTurn()
            if isinstance(item, ReasoningItem):
                thought = plain_text("".join(p.text for p in item.content or ()))
                turn.reasoning += [thought] if thought else []
            elif isinstance(item, FunctionCallItem):
                if not from_model:
                    _check_arguments(item, f"input[{i}].arguments")
                calls.add(item.call_id)
                name = visible(item.namespace, item.name) if visible else item.name
                turn.calls.append(ToolCall(item.call_id, name, item.arguments))
            else:
                turn.text.append(_text(item.content, f"input[{i}].content", "assistant"))
            continue
        if isinstance(item, McpCallItem):
            turn = turn or _AssistantTurn()
            turn.calls.append(ToolCall(item.id, item.name, _object_or_empty(item.arguments)))
            calls.add(item.id)
            out += turn.messages()
            turn = None
            out.append(Message("tool", plain_text(item.result()), tool_call_id=item.id))
            continue
        if turn is not None:
            out += turn.messages()
            turn = None
        if isinstance(item, FunctionCallOutputItem):
            if item.call_id not in calls:
                raise InvalidRequestError(
                    f"input[{i}]: function_call_output for call_id {item.call_id[:80]!r}, but "
                    "no function_call with that call_id comes before it in the conversation",
                    f"input[{i}].call_id")
            out.append(_parts(item.output, f"input[{i}].output", media).message(
                "tool", f"input[{i}].output", tool_call_id=item.call_id))
        else:
            out.append(_parts(item.content, f"input[{i}].content", media).message(
                "system" if item.role == "developer" else item.role, f"input[{i}].content"))
    if turn is not None:
        out += turn.messages()
    return named_results(tuple(out))


def _object_or_empty(arguments: str) -> str:
    """An mcp_call's arguments, or "{}" when they are not a JSON object (the server could not
    run such a call: its error says so, and the conversation stays one a model can take)."""
    try:
        return arguments if isinstance(json.loads(arguments or "{}"), dict) else "{}"
    except ValueError:
        return "{}"


def _check_arguments(item: FunctionCallItem, param: str) -> None:
    try:
        args = json.loads(item.arguments or "{}")
    except ValueError as e:
        raise InvalidRequestError(f"{param}: the arguments of function_call {item.name!r} are "
                                  f"not JSON ({e})", param) from e
    if not isinstance(args, dict):
        raise InvalidRequestError(f"{param}: the arguments of function_call {item.name!r} "
                                  "must be a JSON object", param)


def responses_tool_choice(choice: ToolChoiceMode | FunctionChoice | None) -> ToolChoice:
    if choice is None:
        return ToolChoice("auto")
    if isinstance(choice, FunctionChoice):
        return ToolChoice("function", choice.name)
    return ToolChoice(choice)


def responses_param(param: str | None) -> str | None:
    """A wire path of GenerationRequest.validate (chat completions' `tools[1].function.name`,
    `tool_choice.function.name`) on the Responses API's wire, which has no `function` level."""
    if param and param.startswith(("tools[", "tool_choice.")):
        head, _, rest = param.partition(".function")
        return head + rest
    return param


def responses_format(text: TextConfig | None) -> tuple[bool, dict | None]:
    """`text.format` as json_mode and json_schema (chat completions' response_format)."""
    fmt = text.format if text is not None else None
    if isinstance(fmt, FormatJsonSchema):
        return True, fmt.schema_
    return isinstance(fmt, FormatJsonObject), None


def responses_thinking(reasoning: ReasoningConfig | None) -> Thinking:
    """`reasoning.effort`; its `summary` asks for what Ember does not make (a summary)."""
    knobs = ThinkingKnobs()
    if reasoning is not None and reasoning.effort is not None:
        knobs.level("reasoning.effort", reasoning.effort)
    return knobs.thinking()
