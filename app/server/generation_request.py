"""API fields -> Ember's GenerationRequest, for every API dialect (OpenAI's chat completions
and Responses, Ollama, Anthropic): sampling, the conversation (with its tool calls, tool
results and thinking), the offered tools, the tool choice and the thinking setting. Every
route maps its wire here and nowhere else; the answer goes back through app.server.openai_wire,
responses_wire, ollama_wire and anthropic_wire. Problems are InvalidRequestErrors whose
`param` is the wire path (`messages[2].tool_calls[0].function.arguments`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from app.server.anthropic_schemas import (
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
from app.server.ollama_schemas import OllamaMessage, Think
from app.server.responses_schemas import (
    FormatJsonObject,
    FormatJsonSchema,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    InputItem,
    McpCallItem,
    MessageItem,
    ReasoningConfig,
    ReasoningItem,
    TextConfig,
    TextParts,
)
from app.server.schemas import (
    ChatCompletionRequest,
    ChatMessage,
    NamedToolChoice,
    SpeculativeOptions,
    ToolChoiceMode,
    ToolDef,
)
from backends.base import (
    DEFAULT_SPECULATION,
    GenerationRequest,
    Message,
    ReasoningEffort,
    SamplingParams,
    SpeculativeParams,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
)
from backends.errors import InvalidRequestError

DEFAULTS = SamplingParams()
# The response header naming the offered tools Ember left out of what the model sees: the
# hosted tools of OpenAI's and Anthropic's servers (web search, code execution, ...).
LEFT_OUT_HEADER = "ember-tools-left-out"


def sampling(*, temperature: float | None = None, top_p: float | None = None,
             top_k: int | None = None, min_p: float | None = None,
             repeat_penalty: float | None = None, seed: int | None = None,
             stop: str | list[str] | None = None, max_tokens: int | None = None) -> SamplingParams:
    """`max_tokens` None: until the context is full. Its bound is the model's context, known
    once the model is (app.server.serving)."""
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    return SamplingParams(
        temperature=DEFAULTS.temperature if temperature is None else temperature,
        top_p=DEFAULTS.top_p if top_p is None else top_p,
        top_k=DEFAULTS.top_k if top_k is None else top_k,
        min_p=DEFAULTS.min_p if min_p is None else min_p,
        repeat_penalty=DEFAULTS.repeat_penalty if repeat_penalty is None else repeat_penalty,
        seed=seed, stop=stops, max_tokens=max_tokens)


# ---------------------------------------------------------------------------- messages
def _arguments_text(arguments: str | dict) -> str:
    """JSON text, as Message carries it (an object from Ollama's wire is dumped as is)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments,
                                                                   ensure_ascii=False)


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
                                      arguments=_arguments_text(c.function.arguments))
                             for c in m.tool_calls or ()),
            tool_call_id=m.tool_call_id if m.role == "tool" else None,
            name=m.name if m.role == "tool" else None))
    return _named_results(tuple(out))


def ollama_messages(messages: list[OllamaMessage]) -> tuple[Message, ...]:
    out = []
    for i, m in enumerate(messages):
        if m.tool_calls and m.role != "assistant":
            raise InvalidRequestError(f"message {i}: only assistant messages carry tool_calls "
                                      f"(this one is {m.role!r})", f"messages[{i}].tool_calls")
        out.append(Message(
            role=m.role, content=m.content or "", reasoning=m.thinking or "",
            tool_calls=tuple(ToolCall(id=c.id or "", name=c.function.name,
                                      arguments=_arguments_text(c.function.arguments))
                             for c in m.tool_calls or ()),
            tool_call_id=(m.tool_call_id or None) if m.role == "tool" else None,
            name=m.tool_name if m.role == "tool" else None))
    return _named_results(tuple(out))


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


def _parts_text(content: str | TextParts) -> str:
    return content if isinstance(content, str) else "".join(p.text for p in content)


def responses_messages(items: str | list[InputItem], earlier: tuple[Message, ...] = (), *,
                       from_model: bool = False,
                       visible: Callable[[str | None, str], str] | None = None
                       ) -> tuple[Message, ...]:
    """The Responses API's input after the conversation `earlier` (previous_response_id's):
    a string is a user turn; runs of reasoning, assistant message and function_call items
    become one assistant turn (the reasoning its thinking, the calls its tool_calls);
    function_call_output items become tool turns, each answering a call made before it.
    `from_model`: the items are a response's own output, kept as they are (a call whose
    arguments are not a JSON object is refused when a later request carries it).
    `visible`: the name the model was offered a function by, from its namespace and name
    (app.server.responses_tools.OfferedTools.visible). An mcp_call item (a call
    `ember serve --mcp` ran) ends its assistant turn with that call, and its result (output,
    or error) is the tool turn after it."""
    if isinstance(items, str):
        return _named_results((*earlier, Message("user", items)))
    out = list(earlier)
    calls = {c.id for m in earlier for c in m.tool_calls}
    turn: _AssistantTurn | None = None
    for i, item in enumerate(items):
        if isinstance(item, ReasoningItem | FunctionCallItem) or (
                isinstance(item, MessageItem) and item.role == "assistant"):
            turn = turn or _AssistantTurn()
            if isinstance(item, ReasoningItem):
                thought = "".join(p.text for p in item.content or ())
                turn.reasoning += [thought] if thought else []
            elif isinstance(item, FunctionCallItem):
                if not from_model:
                    _check_arguments(item, f"input[{i}].arguments")
                calls.add(item.call_id)
                name = visible(item.namespace, item.name) if visible else item.name
                turn.calls.append(ToolCall(item.call_id, name, item.arguments))
            else:
                turn.text.append(_parts_text(item.content))
            continue
        if isinstance(item, McpCallItem):
            turn = turn or _AssistantTurn()
            turn.calls.append(ToolCall(item.id, item.name, _object_or_empty(item.arguments)))
            calls.add(item.id)
            out += turn.messages()
            turn = None
            out.append(Message("tool", item.result(), tool_call_id=item.id))
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
            out.append(Message("tool", _parts_text(item.output), tool_call_id=item.call_id))
        else:
            out.append(Message("system" if item.role == "developer" else item.role,
                               _parts_text(item.content)))
    if turn is not None:
        out += turn.messages()
    return _named_results(tuple(out))


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


BLOCK_SEPARATOR = "\n\n"  # between the text blocks of one Anthropic turn (or system)


def _unsupported(block: ImageBlock | DocumentBlock, where: str) -> InvalidRequestError:
    what = "images (vision)" if isinstance(block, ImageBlock) else "documents"
    return InvalidRequestError(f"{where}: {block.type} blocks are not supported yet: Ember's "
                               f"models read text only, not {what}; send the content as "
                               "text blocks", where)


def anthropic_system(system: str | list[TextBlock] | None) -> tuple[Message, ...]:
    """Anthropic's top-level `system`, as the conversation's system message."""
    text = system if isinstance(system, str) else BLOCK_SEPARATOR.join(
        b.text for b in system or ())
    return (Message("system", text),) if text else ()


def anthropic_messages(system: str | list[TextBlock] | None,
                       messages: list[MessageIn]) -> tuple[Message, ...]:
    """Anthropic's conversation as Ember's: the system prompt first; an assistant turn's text,
    thinking (kept as its reasoning; redacted thinking cannot be read and is dropped) and
    tool_use blocks (ToolCalls, `input` as JSON text) become one assistant message; a user
    turn's tool_result blocks become `tool` messages, in order, each answering a tool_use of
    the assistant turn just before it (as Anthropic requires), then its text blocks one user
    message. A result marked `is_error` reads "Error: ..." (a chat template has no other way
    to tell the model). Images and documents are refused: Ember's models read text only."""
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
            out += _user_turn(blocks, f"messages[{i}]", offered)
            offered = {}
    return tuple(out)


def _assistant_turn(blocks: list[ContentBlockIn], where: str) -> Message:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for j, b in enumerate(blocks):
        if isinstance(b, TextBlock):
            texts.append(b.text)
        elif isinstance(b, ThinkingBlockIn):
            thoughts.append(b.thinking)
        elif isinstance(b, ToolUseBlockIn):
            calls.append(ToolCall(id=b.id, name=b.name,
                                  arguments=json.dumps(b.input, ensure_ascii=False)))
        elif isinstance(b, ImageBlock | DocumentBlock):
            raise _unsupported(b, f"{where}.content[{j}]")
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
        texts.append(b.text)
    return Message("system", BLOCK_SEPARATOR.join(texts))


def _user_turn(blocks: list[ContentBlockIn], where: str,
               offered: dict[str, str]) -> list[Message]:
    texts: list[str] = []
    results: list[Message] = []
    for j, b in enumerate(blocks):
        here = f"{where}.content[{j}]"
        if isinstance(b, TextBlock):
            texts.append(b.text)
        elif isinstance(b, ToolResultBlockIn):
            if b.tool_use_id not in offered:
                made = ", ".join(offered) or "none"
                raise InvalidRequestError(
                    f"{here}.tool_use_id: a tool_result for {b.tool_use_id[:80]!r}, but the "
                    f"assistant turn just before it made no tool_use with that id (it made: "
                    f"{made})", f"{here}.tool_use_id")
            results.append(Message("tool", _result_text(b, here), tool_call_id=b.tool_use_id,
                                   name=offered[b.tool_use_id]))
        elif isinstance(b, ImageBlock | DocumentBlock):
            raise _unsupported(b, here)
        else:
            raise InvalidRequestError(f"{here}: a user turn cannot carry a {b.type} block "
                                      "(only the assistant's turns do)", f"{here}.type")
    text = [Message("user", BLOCK_SEPARATOR.join(texts))] if texts else []
    return results + text


def _result_text(block: ToolResultBlockIn, where: str) -> str:
    if block.content is None or isinstance(block.content, str):
        text = block.content or ""
    else:
        parts = []
        for k, part in enumerate(block.content):
            if not isinstance(part, TextBlock):
                raise _unsupported(part, f"{where}.content[{k}]")
            parts.append(part.text)
        text = BLOCK_SEPARATOR.join(parts)
    return f"Error: {text}" if block.is_error else text


def _named_results(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """A tool result that names only its call gets the call's tool name too: some templates
    (Llama 3, gpt-oss) render results under the tool's name, and OpenAI clients send ids."""
    names: dict[str, str] = {}
    out = []
    for m in messages:
        names.update((c.id, c.name) for c in m.tool_calls if c.id)
        if m.role == "tool" and m.name is None and m.tool_call_id in names:
            m = replace(m, name=names[m.tool_call_id])
        out.append(m)
    return tuple(out)


# ---------------------------------------------------------------------------- tools
def offered_tools(defs: list[ToolDef] | None) -> tuple[Tool, ...]:
    """Offered tools; a function without `parameters` takes no arguments. Names and schemas
    are checked by GenerationRequest.validate (backends.base.check_tools)."""
    return tuple(Tool(name=d.function.name, description=d.function.description or "",
                      parameters=({"type": "object", "properties": {}}
                                  if d.function.parameters is None else d.function.parameters))
                 for d in defs or ())


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


def openai_tool_choice(choice: str | NamedToolChoice | None) -> ToolChoice:
    """OpenAI's default is auto (none without tools, which offers nothing either way)."""
    if choice is None:
        return ToolChoice("auto")
    if isinstance(choice, NamedToolChoice):
        return ToolChoice("function", choice.function.name)
    return ToolChoice(choice)  # type: ignore[arg-type]  # the schema allows only the modes


# ---------------------------------------------------------------------------- thinking
EFFORTS: dict[str, tuple[bool, ReasoningEffort | None]] = {
    "none": (False, None),  # LM Studio's and Ollama's way to switch thinking off
    "minimal": (True, "low"),  # OpenAI's lowest level; Ember's scale starts at low
    "low": (True, "low"), "medium": (True, "medium"), "high": (True, "high"),
    "max": (True, "high"),  # Ollama's newest level
    "xhigh": (True, "high"),  # OpenAI's level above high (Responses API)
}


class _ThinkingKnobs:
    """The knobs a request sets, merged into one Thinking; two knobs that disagree (thinking
    off in one, on in another) are the client's mistake, named by the second one's path."""

    def __init__(self) -> None:
        self.enabled: bool | None = None
        self.effort: ReasoningEffort | None = None
        self._enabled_by = self._effort_by = ""

    def set(self, param: str, enabled: bool | None, effort: ReasoningEffort | None = None
            ) -> None:
        if enabled is not None:
            if self.enabled is not None and self.enabled != enabled:
                raise InvalidRequestError(
                    f"{param} turns thinking {'on' if enabled else 'off'}, but "
                    f"{self._enabled_by} turns it {'on' if self.enabled else 'off'}", param)
            self.enabled, self._enabled_by = enabled, param
        if effort is not None:
            if self.effort is not None and self.effort != effort:
                raise InvalidRequestError(f"{param} asks for {effort} reasoning effort, but "
                                          f"{self._effort_by} for {self.effort}", param)
            self.effort, self._effort_by = effort, param

    def level(self, param: str, value: str) -> None:
        if value not in EFFORTS:
            raise InvalidRequestError(f"{param} must be one of none, low, medium, high "
                                      f"(got {str(value)[:40]!r})", param)
        self.set(param, *EFFORTS[value])

    def thinking(self) -> Thinking:
        return Thinking(enabled=self.enabled, effort=self.effort)


def openai_thinking(body: ChatCompletionRequest) -> Thinking:
    """reasoning_effort, reasoning.{effort,enabled} and chat_template_kwargs.{enable_thinking,
    reasoning_effort}: what OpenAI, OpenRouter, LM Studio, vLLM and mlx-lm clients send."""
    knobs = _ThinkingKnobs()
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


def responses_thinking(reasoning: ReasoningConfig | None) -> Thinking:
    """`reasoning.effort`; its `summary` asks for what Ember does not make (a summary)."""
    knobs = _ThinkingKnobs()
    if reasoning is not None and reasoning.effort is not None:
        knobs.level("reasoning.effort", reasoning.effort)
    return knobs.thinking()


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
    knobs = _ThinkingKnobs()
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


def ollama_thinking(think: Think | None) -> Thinking:
    """Ollama's `think`: true, false, or a level (which also turns thinking on)."""
    knobs = _ThinkingKnobs()
    if isinstance(think, bool):
        knobs.set("think", think)
    elif think is not None:
        knobs.level("think", think)
    return knobs.thinking()


# ---------------------------------------------------------------------------- requests
def chat_request(messages: tuple[Message, ...], params: SamplingParams,
                 json_mode: bool = False, json_schema: dict | None = None, *,
                 offered: tuple[Tool, ...] = (), tool_choice: ToolChoice | None = None,
                 parallel_tool_calls: bool = True,
                 thinking: Thinking | None = None,
                 logprobs: int | None = None,
                 cache_key: str | None = None) -> GenerationRequest:
    """With a thinking model, json_mode and json_schema apply to the answer after the
    thinking (the backends' grammar starts there)."""
    return GenerationRequest(
        messages=messages, sampling=params,
        json_mode=json_mode or json_schema is not None, json_schema=json_schema,
        tools=offered, tool_choice=tool_choice or ToolChoice(),
        parallel_tool_calls=parallel_tool_calls, thinking=thinking or Thinking(),
        logprobs=logprobs, cache_key=cache_key)


def responses_format(text: TextConfig | None) -> tuple[bool, dict | None]:
    """`text.format` as json_mode and json_schema (chat completions' response_format)."""
    fmt = text.format if text is not None else None
    if isinstance(fmt, FormatJsonSchema):
        return True, fmt.schema_
    return isinstance(fmt, FormatJsonObject), None


def plain_messages(*turns: tuple[str, str]) -> tuple[Message, ...]:
    """(role, text) turns, for /api/generate's system prompt and prompt."""
    return tuple(Message(role, text) for role, text in turns)


def completion_request(prompt: str, params: SamplingParams, json_mode: bool = False,
                       json_schema: dict | None = None,
                       logprobs: int | None = None) -> GenerationRequest:
    return GenerationRequest(prompt=prompt, sampling=params,
                             json_mode=json_mode or json_schema is not None,
                             json_schema=json_schema, logprobs=logprobs)


def top_logprobs(logprobs: bool | None, top: int | None, *, param: str = "logprobs"
                 ) -> int | None:
    """OpenAI's and Ollama's pair, as GenerationRequest.logprobs: None (off) or how many of
    the most likely tokens each position lists."""
    if top is not None and not logprobs:
        raise InvalidRequestError(f"top_logprobs needs {param}: true", "top_logprobs")
    return (top or 0) if logprobs else None


def with_speculative(request: GenerationRequest,
                     options: SpeculativeOptions | bool | None) -> GenerationRequest:
    """Ember's `speculative` field: absent, Ember's default (prompt lookup where it can run;
    `ember serve --no-speculation` turns the default off, app.server.bridge); false, off;
    true, prompt lookup; an object, as it says."""
    if options is None:
        return replace(request, speculative=DEFAULT_SPECULATION)
    if options is False:
        return replace(request, speculative=None)
    if options is True:
        return replace(request, speculative=SpeculativeParams(method="lookup"))
    return replace(request, speculative=SpeculativeParams(
        method=options.method, draft_model=options.draft_model, max_draft=options.max_draft,
        adaptive=options.adaptive))
