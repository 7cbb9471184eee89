"""The Backend protocol, and the request and event types every front end speaks.

These are plain dataclasses: they cross the worker pipe pickled, and they are what the CLI,
the GUI and the server turn into their own output.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from backends.errors import InvalidRequestError
from backends.media import MAX_MEDIA_PER_REQUEST, MEDIA_MARKER, Media

ROLES = frozenset({"system", "user", "assistant", "tool"})
# "tool_calls": the answer ended by calling tools (the client runs them and sends the results)
FinishReason = Literal["stop", "length", "tool_calls", "cancelled", "error"]


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: `arguments` is a JSON object as text (the OpenAI wire form;
    Ollama's object form is `json.loads(arguments)`). `id` is Ember's `call_...` id, or the
    client's when the call comes back in a conversation."""
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    """One turn. An assistant turn may carry its `reasoning` (the model's thinking) and the
    `tool_calls` it made; a `tool` turn is a result, for the call `tool_call_id` of the tool
    `name`. A user turn may carry images or audio (`media`, backends.media): `content` then
    holds one MEDIA_MARKER where each goes, in order."""
    role: str
    content: str
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    media: tuple[Media, ...] = ()


@dataclass(frozen=True, eq=False)
class Tool:
    """A function the model may call; `parameters` is a JSON schema of its arguments
    (an object schema; `{"type": "object", "properties": {}}` for a tool without any)."""
    name: str
    description: str = ""
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})


ToolChoiceMode = Literal["none", "auto", "required", "function"]


@dataclass(frozen=True)
class ToolChoice:
    """none: no tools offered; auto: the model decides; required: at least one call;
    function: exactly a call of the tool `name`."""
    mode: ToolChoiceMode = "auto"
    name: str | None = None


ReasoningEffort = Literal["low", "medium", "high"]


@dataclass(frozen=True)
class Thinking:
    """Whether a reasoning model thinks before it answers: `enabled` None keeps the model's
    own default; `effort` goes to templates that take one (gpt-oss). One setting for every
    knob clients send (reasoning_effort, reasoning.effort, enable_thinking, think)."""
    enabled: bool | None = None
    effort: ReasoningEffort | None = None


@dataclass(frozen=True)
class SamplingParams:
    # llama.cpp's defaults; temperature 0 means greedy.
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    max_tokens: int | None = 512  # None: until the context is full

    def validate(self) -> None:
        def bad(what: str) -> InvalidRequestError:
            return InvalidRequestError(what)

        if not (isinstance(self.temperature, int | float) and math.isfinite(self.temperature)
                and 0.0 <= self.temperature <= 2.0):
            raise bad(f"temperature must be between 0 and 2, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise bad(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise bad(f"top_k must be 0 (off) or positive, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise bad(f"min_p must be between 0 and 1, got {self.min_p}")
        if not 0.0 < self.repeat_penalty <= 10.0:
            raise bad(f"repeat_penalty must be in (0, 10], got {self.repeat_penalty}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise bad(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.seed is not None and not 0 <= self.seed < 2**32:
            raise bad(f"seed must be between 0 and 2^32-1, got {self.seed}")
        if len(self.stop) > 16 or any(not s for s in self.stop):
            raise bad("stop takes at most 16 non-empty strings")


SpeculativeMethod = Literal["draft", "lookup"]
MAX_DRAFT = 16  # the most tokens one speculative step may propose
# The most tokens one text of an embeddings request may have, special tokens included: BERT
# models' position-embedding limit (the llamacpp backend's embeddings context is this big).
EMBED_MAX_TOKENS = 512


@dataclass(frozen=True)
class SpeculativeParams:
    """Speculative decoding for one request: a smaller `draft_model` with the same tokenizer
    proposes tokens ("draft"), or n-grams of the prompt and answer do ("lookup"); the model
    verifies up to `max_draft` of them in one forward pass. The output is the model's own:
    greedy answers are identical, sampled ones have the model's distribution.
    `draft_path` is filled in by the Runtime from `draft_model` (a worker cannot look it up)."""
    method: SpeculativeMethod = "draft"
    draft_model: str | None = None
    max_draft: int = 8
    draft_path: str | None = None
    adaptive: bool = True  # False: always propose max_draft tokens (tests, benchmarks)
    # True: not asked for but Ember's default (DEFAULT_SPECULATION), so where it cannot run
    # (a remote model, a sliding-window cache, MLX's batch) the request decodes plainly
    # instead of failing
    by_default: bool = False

    def validate(self) -> None:
        if self.method not in ("draft", "lookup"):
            raise InvalidRequestError(f"speculative method must be 'draft' or 'lookup', "
                                      f"got {self.method!r}")
        if self.method == "draft" and not self.draft_model:
            raise InvalidRequestError("speculative method 'draft' needs a draft_model "
                                      "(a smaller model with the same tokenizer)")
        if self.method == "lookup" and self.draft_model:
            raise InvalidRequestError("speculative method 'lookup' takes no draft_model")
        if not (isinstance(self.max_draft, int) and 1 <= self.max_draft <= MAX_DRAFT):
            raise InvalidRequestError(f"max_draft must be between 1 and {MAX_DRAFT}, "
                                      f"got {self.max_draft}")


# What every request of the server, the window and the CLI gets unless it says otherwise
# ("speculative": false, --no-speculation, the window's setting): prompt lookup, which costs
# no memory, gives the model's own output, and switches itself off when it does not pay
# (backends.speculation.policy). Agents re-emit the code they were given, where it pays most.
DEFAULT_SPECULATION = SpeculativeParams(method="lookup", by_default=True)


MAX_TOP_LOGPROBS = 20  # OpenAI's limit on top_logprobs


@dataclass(frozen=True)
class GenerationRequest:
    """A chat (`messages`) or a raw completion (`prompt`), with its sampling settings.
    `json_mode` constrains the output to JSON, `json_schema` to that schema (a grammar); with
    a thinking model, only the answer after the thinking. `tools` are offered to the model
    through its chat template, and `tool_choice` says whether it must call one (enforced by
    a grammar, backends.grammar)."""
    messages: tuple[Message, ...] | None = None
    prompt: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    json_mode: bool = False
    json_schema: dict | None = None
    speculative: SpeculativeParams | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = True
    thinking: Thinking = field(default_factory=Thinking)
    # each generated token's log-probability (LogprobEvent, DoneEvent.logprobs) with this many
    # of the most likely tokens at its position; None: none
    logprobs: int | None = None
    # True: drop the oldest turns to fit the context (the desktop chat and the CLI, which
    # show it: DoneEvent's stats.truncated). False (every API route): a prompt that does not
    # fit is an InvalidRequestError naming the numbers, never cut.
    truncate: bool = False
    # Which client's cache this request's may replace first (OpenAI's prompt_cache_key,
    # Anthropic's metadata.user_id): a backend's prefix cache finds a conversation by its
    # tokens, whoever sends it, and among caches it must overwrite it takes this key's first
    # (backends.llamacpp.engine.others_first). None: no preference.
    cache_key: str | None = None
    # a raw prompt's images or audio (Ollama's /api/generate `images`): `prompt` holds one
    # MEDIA_MARKER for each; a conversation's are its messages' own
    media: tuple[Media, ...] = ()

    def validate(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise InvalidRequestError("give either messages or a prompt")
        if self.prompt is not None and not self.prompt.strip():
            raise InvalidRequestError("the prompt is empty")
        if self.prompt is not None and self.prompt.count(MEDIA_MARKER) != len(self.media):
            raise InvalidRequestError(
                f"the prompt places {self.prompt.count(MEDIA_MARKER)} media marker(s) but the "
                f"request carries {len(self.media)} image(s) or clip(s)", "prompt")
        if self.messages is not None and self.media:
            raise InvalidRequestError("a conversation's images go in its messages")
        if self.messages is not None:
            if not self.messages:
                raise InvalidRequestError("the conversation has no messages")
            for m in self.messages:
                if m.role not in ROLES:
                    raise InvalidRequestError(f"unknown message role {m.role!r} "
                                              f"(use {', '.join(sorted(ROLES))})")
            if not any(m.content.strip() for m in self.messages if m.role == "user"):
                raise InvalidRequestError("the prompt is empty (no user message has any text)")
            check_media(self.messages)
            check_tool_turns(self.messages)
        check_tools(self.tools, self.tool_choice)
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise InvalidRequestError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, "
                                      f"got {self.logprobs}", "top_logprobs")
        self.sampling.validate()
        if self.speculative is not None:
            self.speculative.validate()


def request_media(messages: tuple[Message, ...] | None) -> tuple[Media, ...]:
    """Every image and audio clip of a conversation, in order."""
    return tuple(m for msg in messages or () for m in msg.media)


def refuse_media(request: GenerationRequest, why: str) -> None:
    """An InvalidRequestError for a request with images or audio on a backend that reads
    text only, saying `why` (and what does take them)."""
    if request.media or request_media(request.messages):
        raise InvalidRequestError(f"{why}; images and audio run on the llamacpp backend, "
                                  "with a GGUF model and its projector (mmproj)")


def media_of(request: GenerationRequest) -> tuple[Media, ...]:
    """Every image and audio clip of a request: its raw prompt's, or its conversation's."""
    return request.media + request_media(request.messages)


def check_media(messages: tuple[Message, ...]) -> None:
    """Each message holds one marker per image or clip it carries, and the conversation at
    most MAX_MEDIA_PER_REQUEST of them."""
    total = 0
    for i, m in enumerate(messages):
        markers = m.content.count(MEDIA_MARKER)
        if markers != len(m.media):
            raise InvalidRequestError(
                f"message {i} places {markers} media marker(s) but carries {len(m.media)} "
                "image(s) or clip(s)", f"messages[{i}].content")
        total += len(m.media)
    if total > MAX_MEDIA_PER_REQUEST:
        raise InvalidRequestError(f"the conversation holds {total} images or audio clips; "
                                  f"the limit is {MAX_MEDIA_PER_REQUEST} per request")


TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def check_tools(tools: tuple[Tool, ...], choice: ToolChoice) -> None:
    """Offered tools are callable (a valid name, once; an object JSON schema of arguments),
    and the tool choice can be met."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}].function"
        if not isinstance(tool.name, str) or not TOOL_NAME.match(tool.name):
            raise InvalidRequestError(
                f"tool name {str(tool.name)[:80]!r} is not valid: use 1 to 64 letters, digits, "
                "'_', '-' or '.'", f"{where}.name")
        if tool.name in seen:
            raise InvalidRequestError(f"tool {tool.name!r} is offered twice", f"{where}.name")
        seen.add(tool.name)
        params = tool.parameters
        if not isinstance(params, dict):
            raise InvalidRequestError(f"tool {tool.name!r}: parameters must be a JSON schema "
                                      "object", f"{where}.parameters")
        if params.get("type", "object") != "object":
            raise InvalidRequestError(
                f"tool {tool.name!r}: parameters must describe an object (\"type\": "
                f"\"object\"), got type {params.get('type')!r}", f"{where}.parameters.type")
        try:
            validator_for(params).check_schema(params)
        except SchemaError as e:
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.path)
            raise InvalidRequestError(
                f"tool {tool.name!r}: parameters is not a valid JSON schema at "
                f"parameters{path}: {e.message}", f"{where}.parameters{path}") from e
    if choice.mode in ("required", "function") and not tools:
        raise InvalidRequestError(f"tool_choice {choice.mode!r} needs tools to choose from",
                                  "tool_choice")
    if choice.mode == "function" and choice.name not in seen:
        raise InvalidRequestError(
            f"tool_choice names {choice.name!r}, which is not among the offered tools "
            f"({', '.join(sorted(seen)) or 'none'})", "tool_choice.function.name")


def check_tool_turns(messages: tuple[Message, ...]) -> None:
    """Tool calls in a conversation carry JSON object arguments, and a tool result with an id
    answers a call made earlier in it."""
    calls: set[str] = set()
    for i, m in enumerate(messages):
        for j, call in enumerate(m.tool_calls):
            try:
                args = json.loads(call.arguments or "{}")
            except ValueError as e:
                raise InvalidRequestError(
                    f"message {i}: the arguments of tool call {call.name!r} are not JSON ({e})",
                    f"messages[{i}].tool_calls[{j}].function.arguments") from e
            if not isinstance(args, dict):
                raise InvalidRequestError(
                    f"message {i}: the arguments of tool call {call.name!r} must be a JSON "
                    "object", f"messages[{i}].tool_calls[{j}].function.arguments")
            if call.id:
                calls.add(call.id)
        if m.role == "tool" and m.tool_call_id and m.tool_call_id not in calls:
            raise InvalidRequestError(
                f"message {i}: tool result for call id {m.tool_call_id[:80]!r}, but no earlier "
                "assistant message made a call with that id", f"messages[{i}].tool_call_id")


@dataclass(frozen=True)
class Stats:
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float  # request start to first token
    decode_tokens_per_s: float  # tokens after the first, over the time they took
    finish_reason: FinishReason
    truncated: bool  # earlier turns (or the prompt's start) were dropped to fit the context
    total_s: float
    cached_tokens: int = 0  # prompt tokens reused from the KV cache instead of recomputed
    # of cached_tokens, those whose cells were restored from a cache saved on disk (a
    # conversation from before a restart: backends/llamacpp/kv_store.py)
    disk_tokens: int = 0
    draft_tokens: int = 0  # tokens proposed by speculative decoding
    accepted_tokens: int = 0  # of those, the ones the model accepted
    reasoning_tokens: int = 0  # completion tokens spent thinking (part of completion_tokens)
    # why speculative decoding was switched off for this request, if it was (e.g. a grammar)
    speculation_off: str = ""
    # the request's stop string that ended the answer (finish_reason "stop"), if one did;
    # None when the model ended it (or a remote server did not say which string matched)
    stop_sequence: str | None = None
    media_tokens: int = 0  # of prompt_tokens, those the request's images and audio took


@dataclass(frozen=True)
class TokenEvent:
    """A piece of the answer's text (content: no thinking, no tool-call markup)."""
    text: str


@dataclass(frozen=True)
class ReasoningEvent:
    """A piece of the model's thinking."""
    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    """A piece of tool call number `index` (0, 1, ... within the answer): its first event
    carries the call's `id` and `name`, every event may carry a piece of its `arguments`
    (JSON text; the pieces concatenate to the call's arguments)."""
    index: int
    arguments: str = ""
    id: str = ""
    name: str = ""


@dataclass(frozen=True)
class TopLogprob:
    """One of the most likely tokens at a position: its text (`bytes` decoded, invalid UTF-8
    replaced), its bytes, and its log-probability."""
    token: str
    bytes: bytes
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability under the model: the log-softmax of the model's
    raw logits at its position, before the sampling settings, penalties or a grammar shape
    the draw (what llama-server and vLLM report). With speculative decoding, the target
    model's. `top`: the most likely tokens there, most likely first."""
    id: int
    token: str
    bytes: bytes
    logprob: float
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class LogprobEvent:
    """A generated token's log-probability (only for a request that asked for them): one per
    completion token, in order, before the text events the token produced."""
    entry: TokenLogprob


@dataclass(frozen=True)
class DoneEvent:
    """The request's end: the whole answer, exactly what its events streamed (a tool call
    cut off by max_tokens is left out of `tool_calls`)."""
    stats: Stats
    text: str  # the whole answer's content
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()  # every LogprobEvent of the request, in order


@dataclass(frozen=True)
class ErrorEvent:
    message: str
    kind: Literal["invalid", "crash", "backend"] = "backend"
    partial: str = ""  # the answer's text received before the failure (remote streams)


@dataclass(frozen=True)
class Admitted:
    """A generation's first event from a local backend: its prompt was rendered and
    tokenized (once, by the generation itself) and it is queued. `prompt_tokens` is the
    prompt it runs (after dropped turns, for a request that may be cut); `cached_tokens`
    what a free slot's KV cache already holds of it now, where the backend knows before its
    next step (llama.cpp), else 0."""
    prompt_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True)
class PromptTooLong:
    """A generation's first and last event when its prompt (which may not be cut: `truncate`
    False) does not fit the loaded context with room for its answer: `tokens` against the
    `limit` that `context` leaves (backends.prompt.prompt_limit). Nothing was queued; the
    Runtime decides what happens (a larger context, or the caller's error)."""
    tokens: int
    limit: int
    context: int

    @property
    def message(self) -> str:
        return (f"the prompt is {self.tokens} tokens; with room for the answer "
                f"({self.context - self.limit} tokens) the loaded context ({self.context} "
                f"tokens) holds {self.limit}: shorten the prompt, ask for fewer max_tokens, "
                "or load the model with a larger context")


Event = TokenEvent | ReasoningEvent | ToolCallEvent | LogprobEvent | DoneEvent | ErrorEvent
Admission = Admitted | PromptTooLong  # what a backend's submit answers, the stream's first event
OutputEvent = TokenEvent | ReasoningEvent | ToolCallEvent  # what an output parser produces


@dataclass(frozen=True)
class Capabilities:
    formats: tuple[str, ...]
    batching: bool = False
    speculative: bool = False
    embeddings: bool = False
    grammar: bool = False  # constrained decoding (JSON mode, schemas, forced tool calls)
    logprobs: bool = False  # each generated token's log-probability (LogprobEvent)
    # images (and audio, where the projector hears) for models that have a projector
    # (ModelFiles.projector); a backend without it refuses requests that carry media
    media: bool = False


@dataclass(frozen=True)
class LoadPlan:
    """How to load a model here; made by the app's fit model (`app.fit.plan_for`), explained
    in `reason`."""
    context: int
    threads: int
    gpu_layers: int = 0
    batch: int = 512
    parallel: int = 1
    reason: str = ""
    memory_bytes: int = 0  # what the fit model says this load needs (for eviction)
    gpu_memory_bytes: int = 0  # of it, what is in GPU memory (all of it on unified memory)
    # weight-only quantization at load: "int8" or "int4" (the cuda backend's kernels/);
    # None keeps the weights in the backend's float dtype
    quant: str | None = None
    # the KV cache's type: "f16", or "q8_0" (llama.cpp only) where it lets a larger context fit
    kv_cache: str = "f16"
    # mlx on the CPU with OpenBLAS: quantized weights unpacked to float32 at load, which
    # OpenBLAS multiplies about 20x faster than mlx's quantized matmul (backends.mlx_blas)
    unpack_weights: bool = False
    # a folder for saved KV caches (the data folder's kv-cache/, set by the Runtime), where the
    # llama.cpp backend keeps conversations across restarts, and its size limit in bytes for
    # all models together; None saves nothing
    kv_store: str | None = None
    kv_store_bytes: int = 4 << 30


class ModelFiles(Protocol):
    """What a backend needs to know about a model to load it: where its files are, their
    format, and the names to show in messages. The app's store (`app.store.InstalledModel`)
    is one; a benchmark or a test can pass any object with these attributes."""
    @property
    def id(self) -> str: ...
    @property
    def format(self) -> str: ...  # "gguf", "mlx", "safetensors"
    @property
    def path(self) -> Path: ...  # a GGUF file, or a model directory
    @property
    def ref(self) -> str: ...  # "id:quant", as users name it
    @property
    def architecture(self) -> str: ...
    @property
    def context_length(self) -> int: ...  # trained context
    # The model's multimodal projector (`mmproj*.gguf`: images, audio), or None: a model with
    # none reads text only. Read with getattr(model, "projector", None): older stand-ins
    # lack it.
    # The file's sha256 (`app.store.InstalledModel.sha256`), the key of its saved KV caches
    # (backends/llamacpp/kv_store.py): read with getattr(model, "sha256", None); a model
    # without one keeps no caches on disk.


class Backend(Protocol):
    """`generate` runs one request. The worker serves many at once through `submit` (queue
    a request under a stream id) and `step` (advance every running request by one decode,
    returning the events it produced); `fail_all` ends them all after a failed step.
    `count_prompt_tokens` is the length of the request's whole prompt (its chat template
    rendered, nothing dropped to fit the context). A backend whose `tokenize`,
    `detokenize` and `count_prompt_tokens` are safe to call from another thread while a
    `step` runs says so in `tokenizes_while_stepping`: the worker then answers them at once,
    not after the step (a count_tokens request need not wait for a prompt batch)."""
    name: str
    tokenizes_while_stepping: bool

    def capabilities(self) -> Capabilities: ...
    # returns the plan it loaded with where that differs from `plan` (fewer GPU layers
    # where the GPU could not hold the plan, its reason saying so), else None
    def load(self, model: ModelFiles, plan: LoadPlan) -> LoadPlan | None: ...
    def generate(self, request: GenerationRequest,
                 cancelled: CancelFlag | None = None) -> Iterator[Event]: ...
    # renders and tokenizes the prompt (the only time a generation does), and queues it
    # unless it is too long (PromptTooLong: nothing queued)
    def submit(self, stream_id: str, request: GenerationRequest,
               cancelled: CancelFlag | None = None) -> Admission: ...
    def step(self) -> list[tuple[str, Event]]: ...
    def has_work(self) -> bool: ...
    def fail_all(self, message: str) -> list[tuple[str, Event]]: ...
    def tokenize(self, text: str) -> list[int]: ...
    def detokenize(self, tokens: list[int]) -> str: ...
    def count_prompt_tokens(self, request: GenerationRequest) -> int: ...
    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]: ...
    def unload(self) -> None: ...


def check_token_ids(tokens: list[int], n_vocab: int) -> None:
    """Token ids a client sent are in the model's vocabulary (llama.cpp would read past its
    tables on any other)."""
    for i, token in enumerate(tokens):
        if not isinstance(token, int) or not 0 <= token < n_vocab:
            raise InvalidRequestError(f"token {i} is {token!r}, not an id of this model's "
                                      f"vocabulary (0 to {n_vocab - 1})", "tokens")


class CancelFlag(Protocol):
    def is_set(self) -> bool: ...
