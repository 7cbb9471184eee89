"""A model's chat template with what Ember adds around it: the conversation's tool calls,
tool results and reasoning in the shape templates read (backends.chat_format.turns), the
offered tools and thinking switches as template variables, and the parser for the answer
that follows the prompt. Every local backend renders through one `ChatTemplate`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from backends.base import GenerationRequest, Message
from backends.chat_format.base import ChatFormat, OutputParser
from backends.chat_format.detect import detect_format
from backends.chat_format.families import by_name
from backends.chat_format.families.base import Family
from backends.chat_format.markers import TokenMarkedParser, marker_pieces, token_markers
from backends.chat_format.parsers import PlainParser, make_parser
from backends.chat_format.turns import named_results, template_messages
from backends.chat_template import render_chat
from backends.errors import InvalidRequestError, TemplateError

__all__ = ["ChatTemplate", "template_messages", "template_variables"]


def offers_tools(request: GenerationRequest) -> bool:
    return bool(request.tools) and request.tool_choice.mode != "none"


def tool_dicts(request: GenerationRequest) -> list[dict]:
    return [{"type": "function",
             "function": {"name": t.name, "description": t.description,
                          "parameters": t.parameters}}
            for t in request.tools]


def template_variables(fmt: ChatFormat, request: GenerationRequest) -> dict:
    """tools (unless tool_choice is none, or the template has no tool support: then they are
    in the system prompt), enable_thinking and reasoning_effort.

    One thinking setting reaches every template: an effort turns thinking on where the
    template only has a switch (Qwen3); "off" is the lowest effort where it only has an
    effort (gpt-oss cannot stop thinking)."""
    variables: dict = {}
    family = by_name(fmt.tools)
    if offers_tools(request) and fmt.native_tools and family.tools_placer is None \
            and family.tools_prompt is None:
        variables["tools"] = tool_dicts(request)
    enabled, effort = request.thinking.enabled, request.thinking.effort
    if enabled is None and effort is not None and not fmt.thinking_effort:
        enabled = True
    if enabled is not None:
        variables["enable_thinking"] = enabled
        if family.thinking_variable is not None:
            variables[family.thinking_variable] = family.thinking_values[enabled]
    if enabled is False and fmt.thinking_budget:
        variables["thinking_budget"] = 0  # Seed-OSS has no switch: a budget of 0 is off
    if effort is None and enabled is False and fmt.thinking_effort:
        effort = "low"
    if effort is not None:
        variables["reasoning_effort"] = effort
    return variables


@dataclass
class ChatTemplate:
    source: str | None
    bos_text: str = ""
    eos_text: str = ""
    model_ref: str = "this model"
    fmt: ChatFormat = field(init=False)
    # the format's markers that come as tokens of the model's vocabulary (the backend's
    # marker_pieces): only those tokens count as markers (backends.chat_format.markers)
    token_markers: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        self.fmt = detect_format(self.source)

    def render(self, messages: tuple[Message, ...], request: GenerationRequest) -> str:
        if self.source is None:
            raise InvalidRequestError(
                f"{self.model_ref} has no chat template (a base model): send a plain prompt "
                "instead of a conversation")
        family = self.family
        tools = request.tools if offers_tools(request) else ()
        if tools and not family.parses_calls:
            raise InvalidRequestError(
                f"{self.model_ref} writes tool calls in a format Ember does not know (its "
                "chat template matches no model family Ember reads, or more than one), so "
                "its calls would come back as plain text; send the request without tools, "
                "or use a model whose family Ember supports", "tools")
        if family.history_as_text is not None:
            messages = family.history_as_text(named_results(messages), tools)
        elif tools and family.tools_prompt is not None:
            messages = _with_system_text(messages, family.tools_prompt(tools))
        dicts = template_messages(messages, self.fmt)
        if family.shape_turns is not None:
            dicts = family.shape_turns(dicts, self.source)
        if tools and family.tools_placer is not None:
            dicts = family.tools_placer(dicts, tool_dicts(request))
        variables = template_variables(self.fmt, request)
        folded = fold_later_system_turns(dicts)
        try:
            prompt = self._render(dicts, variables)
            if folded is not dicts and not _shows_later_system_turns(prompt, dicts):
                # a template that drops a system turn after the first (gpt-oss, SmolLM3)
                prompt = self._render(folded, variables)
        except TemplateError:
            if folded is not dicts:  # a template that refuses a system turn after the first
                try:
                    return self._thinking_closed(self._render(folded, variables), request)
                except TemplateError:
                    dicts = folded
            if not dicts or dicts[0]["role"] != "system" or len(dicts) < 2:
                raise
            # a template that refuses a system turn (Gemma 2): it opens the first user turn
            system, first = dicts[0], dicts[1]
            first = {**first, "content": f"{system['content']}\n\n{first['content']}"}
            prompt = self._render([first, *dicts[2:]], variables)
        return self._thinking_closed(prompt, request)

    @property
    def family(self) -> Family:
        return by_name(self.fmt.tools)

    def _render(self, dicts: list[dict], variables: dict) -> str:
        prompt = self._render_as_given(dicts, variables)
        if _shows_contents(prompt, dicts):
            return prompt
        # a template that reads only a list of content parts (SmolVLM's, Idefics'): each
        # string is looped over as characters and nothing of it is shown. One text part
        # holds it, media markers and all, where the image goes.
        parts = [{**d, "content": [{"type": "text", "text": d["content"]}]}
                 if isinstance(d.get("content"), str) and d["content"] else d for d in dicts]
        try:
            as_parts = self._render_as_given(parts, variables)
        except TemplateError:
            return prompt
        return as_parts if _shows_contents(as_parts, dicts) else prompt

    def _render_as_given(self, dicts: list[dict], variables: dict) -> str:
        return render_chat(self.source or "", dicts, bos_token=self.bos_text,
                           eos_token=self.eos_text, **variables)

    def _thinking_closed(self, prompt: str, request: GenerationRequest) -> str:
        """Thinking off for a template that opens it with no switch to say otherwise
        (DeepSeek-R1-Distill ends its prompt with `<think>\\n`): Ember closes it right there,
        as Qwen3's template does for enable_thinking=false, so the model answers at once."""
        markers = self.fmt.thinking
        if (request.thinking.enabled is False and markers is not None
                and prompt.rstrip().endswith(markers.open)):
            return f"{prompt.rstrip()}\n\n{markers.close}\n\n"
        return prompt

    def parser(self, request: GenerationRequest, prompt: str | None) -> OutputParser:
        """The parser of the answer to `prompt` (the rendered conversation; None for a raw
        completion, whose text is all answer)."""
        parser: OutputParser
        if prompt is None:
            parser = PlainParser()
        else:
            opens = (self.fmt.thinking is not None
                     and prompt.rstrip().endswith(self.fmt.thinking.open))
            parser = make_parser(self.fmt, thinking_open=opens,
                                 tools_offered=offers_tools(request), tools=request.tools)
        return TokenMarkedParser(parser, self.token_markers) if self.token_markers else parser

    def use_marker_tokens(self, tokenize: Callable[[str], list[int]]) -> dict[int, bytes]:
        """What the format's marker tokens detokenize to (a backend shows them so), and
        from now on only those tokens count as markers."""
        pieces = marker_pieces(self.fmt.special_markers, tokenize)
        self.token_markers = token_markers(pieces)
        return pieces


def _with_system_text(messages: tuple[Message, ...], text: str) -> tuple[Message, ...]:
    """`text` (a family's description of the tools) at the end of the system prompt."""
    if messages and messages[0].role == "system":
        first = messages[0]
        return (Message("system", f"{first.content}\n\n{text}" if first.content else text),
                *messages[1:])
    return (Message("system", text), *messages)


def _shows_contents(prompt: str, dicts: list[dict]) -> bool:
    """Whether the user and assistant texts are in the prompt (as the template trims them)."""
    return all(d["content"].strip() in prompt for d in dicts
               if d["role"] in ("user", "assistant") and isinstance(d.get("content"), str))


def _shows_later_system_turns(prompt: str, dicts: list[dict]) -> bool:
    return all(str(d.get("content") or "") in prompt for d in dicts[1:] if d["role"] == "system")


def fold_later_system_turns(dicts: list[dict]) -> list[dict]:
    """The conversation for a template that takes a system turn only at the start (Llama 3,
    Gemma, Mistral): a later system turn's text joins the user turn just before it (after
    its text: what a conversation sends on later turns renders the same, so the prefix
    cache keeps it), else the next user turn (before its text), else the last user turn,
    else it becomes a user turn. The leading system turn stays as it is."""
    head = dicts[:1] if dicts and dicts[0]["role"] == "system" else []
    if all(d["role"] != "system" for d in dicts[len(head):]):
        return dicts  # the usual case: nothing to fold, nothing copied
    folded: list[dict] = []
    pending: list[str] = []
    for d in dicts[len(head):]:
        d = dict(d)
        text = str(d.get("content") or "")
        if d["role"] == "system":
            if folded and folded[-1]["role"] == "user" and not pending:
                folded[-1]["content"] = f"{folded[-1].get('content') or ''}\n\n{text}"
            else:
                pending.append(text)
            continue
        if d["role"] == "user" and pending:
            d["content"] = "\n\n".join([*pending, text])
            pending = []
        folded.append(d)
    if pending:
        last_user = next((d for d in reversed(folded) if d["role"] == "user"), None)
        if last_user is None:
            folded.append({"role": "user", "content": "\n\n".join(pending)})
        else:
            last_user["content"] = "\n\n".join([str(last_user.get("content") or ""),
                                                  *pending])
    return head + folded
