"""The Backend protocol, and the request and event types every front end speaks.

These are plain dataclasses: they cross the worker pipe pickled, and they are what the CLI,
the GUI and the server turn into their own output.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from backends.errors import InvalidRequestError

ROLES = frozenset({"system", "user", "assistant", "tool"})
FinishReason = Literal["stop", "length", "cancelled", "error"]


@dataclass(frozen=True)
class Message:
    role: str
    content: str


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


@dataclass(frozen=True)
class GenerationRequest:
    """A chat (`messages`) or a raw completion (`prompt`), with its sampling settings.
    `json_mode` constrains the output to JSON, `json_schema` to that schema (a grammar)."""
    messages: tuple[Message, ...] | None = None
    prompt: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    json_mode: bool = False
    json_schema: dict | None = None
    speculative: SpeculativeParams | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def validate(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise InvalidRequestError("give either messages or a prompt")
        if self.prompt is not None and not self.prompt.strip():
            raise InvalidRequestError("the prompt is empty")
        if self.messages is not None:
            if not self.messages:
                raise InvalidRequestError("the conversation has no messages")
            for m in self.messages:
                if m.role not in ROLES:
                    raise InvalidRequestError(f"unknown message role {m.role!r} "
                                              f"(use {', '.join(sorted(ROLES))})")
            if not any(m.content.strip() for m in self.messages if m.role == "user"):
                raise InvalidRequestError("the prompt is empty (no user message has any text)")
        self.sampling.validate()
        if self.speculative is not None:
            self.speculative.validate()


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
    draft_tokens: int = 0  # tokens proposed by speculative decoding
    accepted_tokens: int = 0  # of those, the ones the model accepted


@dataclass(frozen=True)
class TokenEvent:
    text: str


@dataclass(frozen=True)
class DoneEvent:
    stats: Stats
    text: str  # the whole answer


@dataclass(frozen=True)
class ErrorEvent:
    message: str
    kind: Literal["invalid", "crash", "backend"] = "backend"
    partial: str = ""  # the answer's text received before the failure (remote streams)


Event = TokenEvent | DoneEvent | ErrorEvent


@dataclass(frozen=True)
class Capabilities:
    formats: tuple[str, ...]
    batching: bool = False
    speculative: bool = False
    embeddings: bool = False


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
    # weight-only quantization at load: "int8" or "int4" (the cuda backend's kernels/);
    # None keeps the weights in the backend's float dtype
    quant: str | None = None


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


class Backend(Protocol):
    """`generate` runs one request. The worker serves many at once through `submit` (queue
    a request under a stream id) and `step` (advance every running request by one decode,
    returning the events it produced); `fail_all` ends them all after a failed step."""
    name: str

    def capabilities(self) -> Capabilities: ...
    def load(self, model: ModelFiles, plan: LoadPlan) -> None: ...
    def generate(self, request: GenerationRequest,
                 cancelled: CancelFlag | None = None) -> Iterator[Event]: ...
    def submit(self, stream_id: str, request: GenerationRequest,
               cancelled: CancelFlag | None = None) -> None: ...
    def step(self) -> list[tuple[str, Event]]: ...
    def has_work(self) -> bool: ...
    def fail_all(self, message: str) -> list[tuple[str, Event]]: ...
    def tokenize(self, text: str) -> list[int]: ...
    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]: ...
    def unload(self) -> None: ...


class CancelFlag(Protocol):
    def is_set(self) -> bool: ...
