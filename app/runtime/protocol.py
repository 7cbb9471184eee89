"""Messages over the pipe between the Runtime (parent) and a worker process. All picklable."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Generic, TypeVar

from backends.base import Admission, Capabilities, Event, GenerationRequest, LoadPlan

T = TypeVar("T")


class Call(Generic[T]):
    """A command that gets one Reply, whose value is a T: what the Backend method of the
    same name returns (Worker.call returns it typed)."""


# parent -> worker
@dataclass(frozen=True)
class Generate:
    stream_id: str  # one per Generation: a request object may be sent more than once
    request: GenerationRequest


@dataclass(frozen=True)
class Cancel:
    stream_id: str


@dataclass(frozen=True)
class Tokenize(Call[list[int]]):
    call_id: str
    text: str


@dataclass(frozen=True)
class CountPromptTokens(Call[int]):
    """How many tokens the request's whole prompt is (its chat template rendered)."""
    call_id: str
    request: GenerationRequest


@dataclass(frozen=True)
class Detokenize(Call[list[str]]):
    """Each sequence of token ids as text (control tokens as their text)."""
    call_id: str
    sequences: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Embed(Call[tuple[list[list[float]], int]]):
    call_id: str
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Shutdown:
    pass


# worker -> parent
@dataclass(frozen=True)
class Loaded:
    pid: int
    backend: str
    context: int
    capabilities: Capabilities  # what the loaded backend says it can do
    plan: LoadPlan | None = None  # the plan it loaded with, where the backend changed it


@dataclass(frozen=True)
class LoadFailed:
    message: str


@dataclass(frozen=True)
class Out:
    """One stream's event; its first is the Admission (Admitted or PromptTooLong)."""
    stream_id: str
    event: Event | Admission


@dataclass(frozen=True)
class OutBatch:
    """The events of one engine step, for several streams: one pipe message per step."""
    events: tuple[tuple[str, Event], ...]


@dataclass(frozen=True)
class Reply:
    call_id: str
    value: object = None
    error: str | None = None
    invalid: bool = False  # the error is the caller's (bad input), not the worker's


@dataclass(frozen=True)
class Log:
    """A record the worker logged, for the parent to write (app.logs says why the pipe)."""
    record: logging.LogRecord
