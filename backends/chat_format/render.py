"""A model's chat template with what Ember adds around it: the conversation's tool calls,
tool results and reasoning in the shape templates read, the offered tools and thinking
switches as template variables, and the parser for the answer that follows the prompt.
Every local backend renders through one `ChatTemplate`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from backends.base import GenerationRequest, Message
from backends.chat_format.base import ChatFormat, OutputParser
from backends.chat_format.detect import detect_format
from backends.chat_format.parsers import PlainParser, make_parser
from backends.chat_template import render_chat
from backends.errors import InvalidRequestError


def template_messages(messages: tuple[Message, ...], fmt: ChatFormat) -> list[dict]:
    """Messages as Hugging Face chat templates read them: tool calls with their arguments as
    an object, reasoning as `reasoning_content` (and `thinking`, gpt-oss's name)."""
    out: list[dict] = []
    for m in messages:
        d: dict = {"role": m.role, "content": m.content}
        if m.reasoning:
            d["reasoning_content"] = d["thinking"] = m.reasoning
        if m.tool_calls:
            d["tool_calls"] = [{"id": c.id, "type": "function",
                                "function": {"name": c.name,
                                             "arguments": json.loads(c.arguments or "{}")}}
                               for c in m.tool_calls]
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        if m.name:
            d["name"] = m.name
        out.append(d)
    return out


def template_variables(fmt: ChatFormat, request: GenerationRequest) -> dict:
    """tools (unless tool_choice is none), enable_thinking and reasoning_effort."""
    variables: dict = {}
    if request.tools and request.tool_choice.mode != "none":
        variables["tools"] = [{"type": "function",
                               "function": {"name": t.name, "description": t.description,
                                            "parameters": t.parameters}}
                              for t in request.tools]
    if request.thinking.enabled is not None:
        variables["enable_thinking"] = request.thinking.enabled
    if request.thinking.effort is not None:
        variables["reasoning_effort"] = request.thinking.effort
    return variables


@dataclass
class ChatTemplate:
    source: str | None
    bos_text: str = ""
    eos_text: str = ""
    model_ref: str = "this model"
    fmt: ChatFormat = field(init=False)

    def __post_init__(self) -> None:
        self.fmt = detect_format(self.source)

    def render(self, messages: tuple[Message, ...], request: GenerationRequest) -> str:
        if self.source is None:
            raise InvalidRequestError(
                f"{self.model_ref} has no chat template (a base model): send a plain prompt "
                "instead of a conversation")
        return render_chat(self.source, template_messages(messages, self.fmt),
                           bos_token=self.bos_text, eos_token=self.eos_text,
                           **template_variables(self.fmt, request))

    def parser(self, request: GenerationRequest, prompt: str | None) -> OutputParser:
        """The parser of the answer to `prompt` (the rendered conversation; None for a raw
        completion, whose text is all answer)."""
        if prompt is None:
            return PlainParser()
        opens = (self.fmt.thinking is not None
                 and prompt.rstrip().endswith(self.fmt.thinking.open))
        return make_parser(self.fmt, thinking_open=opens,
                           tools_offered=bool(request.tools)
                           and request.tool_choice.mode != "none")
