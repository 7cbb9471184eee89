"""What every API dialect builds its GenerationRequest from: sampling, the request itself,
the offered tools in OpenAI's shape (which Ollama and the Responses API share), the thinking
knobs and Ember's speculative option. Each dialect's own fields (its conversation, tool
choice and thinking switch) map in its package's `inbound` module (app.server.openai.inbound,
responses.inbound, ollama.inbound, anthropic.inbound) and its answer goes back through the
package's `wire`. Problems are InvalidRequestErrors whose
`param` is the wire path (`messages[2].tool_calls[0].function.arguments`)."""

from __future__ import annotations

import json
from dataclasses import replace

from app.server.openai.schemas import (
    SpeculativeOptions,
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
    ToolChoice,
)
from backends.errors import InvalidRequestError
from backends.media import Media, plain_text

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


def arguments_text(arguments: str | dict) -> str:
    """JSON text, as Message carries it (an object from Ollama's wire is dumped as is)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments,
                                                                   ensure_ascii=False)


def named_results(messages: tuple[Message, ...]) -> tuple[Message, ...]:
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


def offered_tools(defs: list[ToolDef] | None) -> tuple[Tool, ...]:
    """Offered tools; a function without `parameters` takes no arguments. Names and schemas
    are checked by GenerationRequest.validate (backends.base.check_tools)."""
    return tuple(Tool(name=d.function.name, description=d.function.description or "",
                      parameters=({"type": "object", "properties": {}}
                                  if d.function.parameters is None else d.function.parameters))
                 for d in defs or ())


EFFORTS: dict[str, tuple[bool, ReasoningEffort | None]] = {
    "none": (False, None),  # LM Studio's and Ollama's way to switch thinking off
    "minimal": (True, "low"),  # OpenAI's lowest level; Ember's scale starts at low
    "low": (True, "low"), "medium": (True, "medium"), "high": (True, "high"),
    "max": (True, "high"),  # Ollama's newest level
    "xhigh": (True, "high"),  # OpenAI's level above high (Responses API)
}


class ThinkingKnobs:
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


def plain_messages(*turns: tuple[str, str]) -> tuple[Message, ...]:
    """(role, text) turns, for /api/generate's system prompt and prompt: client text, made
    plain (backends.media.plain_text)."""
    return tuple(Message(role, plain_text(text)) for role, text in turns)


def completion_request(prompt: str, params: SamplingParams, json_mode: bool = False,
                       json_schema: dict | None = None,
                       logprobs: int | None = None,
                       media: tuple[Media, ...] = ()) -> GenerationRequest:
    """`prompt` as it goes to the model: client text made plain (backends.media.plain_text),
    with a marker for each of `media` where it goes."""
    return GenerationRequest(prompt=prompt, sampling=params,
                             json_mode=json_mode or json_schema is not None,
                             json_schema=json_schema, logprobs=logprobs, media=media)


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
