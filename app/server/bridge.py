"""What the API routes (OpenAI, Ollama, Anthropic) share: turning API requests into
GenerationRequests, admission (a bounded queue, then 429), streaming Runtime events into async
code, and cancelling a generation when its client goes away."""

from __future__ import annotations

import asyncio
import contextvars
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import anyio
from starlette.datastructures import State
from starlette.requests import Request

from app.runtime.backend_table import check_backend
from app.runtime.generation import Generation
from app.runtime.runtime import Runtime, Serving
from app.server import access_log
from app.server.mcp_rounds import with_mcp
from app.server.metrics import Metrics
from app.server.model_name import name_problem
from app.server.serving import check_media, check_serving
from backends.base import DoneEvent, ErrorEvent, Event, GenerationRequest, media_of
from backends.errors import InvalidRequestError

MAX_EMBED_INPUTS = 256
T = TypeVar("T")

# The prompt's length as open_events counted it for a local model (None: not counted, a
# remote model), for what a stream says before its first token (Anthropic's message_start).
# open_events is awaited in the route's own context, so the route reads what it set.
_counted_prompt: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "ember_counted_prompt", default=None)


def counted_prompt_tokens() -> int | None:
    """The prompt tokens of the request this route opened (open_events), if counted."""
    return _counted_prompt.get()


class ServerBusyError(Exception):
    def __init__(self, retry_after_s: int) -> None:
        super().__init__("server busy: too many requests queued; retry later")
        self.retry_after_s = retry_after_s


def check_model_name(name: str) -> str:
    """The model name of a request, checked; every route that names a model comes here, so
    this is where the request's log line learns it (app.server.access_log)."""
    problem = name_problem(name)
    if problem is not None:
        raise InvalidRequestError(problem, "model")
    access_log.note_model(name)
    return name


def parse_keep_alive(value: str | int | float | None) -> float | None:
    """Ollama's keep_alive: seconds, or a duration like "10m", "1h", "30s"; negative: forever."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", value)
    if not m:
        raise InvalidRequestError(f"invalid keep_alive {value!r}: use seconds or e.g. '10m'")
    number, unit = float(m.group(1)), m.group(2) or "s"
    return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


@dataclass
class Admission:
    """At most `capacity` generations run and `queue_limit` wait; the rest get 429. A request
    takes its place first (`admit`), before it loads or counts anything, in one step under
    the lock, so a burst cannot pass the limit between a check and an entry."""
    capacity: int = 1
    queue_limit: int = 16

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0

    def admit(self) -> Ticket:
        """A place, or ServerBusyError (the 429) now, before a response has started."""
        with self._lock:
            if self.active >= self.capacity + self.queue_limit:
                raise ServerBusyError(retry_after_s=max(1, (self.active - self.capacity) * 2))
            self.active += 1
        return Ticket(self)

    def _leave(self) -> None:
        with self._lock:
            self.active -= 1

    @property
    def queued(self) -> int:
        return max(0, self.active - self.capacity)


class Ticket:
    """One request's place in the Admission; given back once, however the request ends."""

    def __init__(self, admission: Admission) -> None:
        self._admission: Admission | None = admission
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            admission, self._admission = self._admission, None
        if admission is not None:
            admission._leave()

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ClientGoneError(Exception):
    """The client closed its connection before its answer was ready."""


POLL_DISCONNECT_S = 0.2


async def until_disconnected(request: Request, work: Callable[[], Awaitable[T]]) -> T:
    """`work()`, cancelled when the client goes away (ClientGoneError): a non-streaming
    request whose client has closed the socket stops generating and frees its place at once,
    as a stream does (Starlette cancels a stream whose client left; a plain response has no
    one watching)."""
    result: list[T] = []
    try:
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                while not await request.is_disconnected():
                    await anyio.sleep(POLL_DISCONNECT_S)
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                result.append(await work())
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the work's own error, as the route would see it
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    if not result:
        access_log.note_error("client_gone")
        raise ClientGoneError()
    return result[0]


def stream_events(ticket: Ticket, metrics: Metrics, model: str,
                  generation: Generation, sink: LoopSink, endpoint: str) -> AsyncIterator[Event]:
    """Events of one generation (opened by Runtime.submit into `sink`), holding `ticket`
    (the request's place) until it ends. Leaving early (the client disconnected and the task
    was cancelled, or the consumer stopped) cancels the generation in its worker at once; a
    stream dropped unread gives its place back when it is collected."""
    events = _events(ticket, metrics, model, generation, sink, endpoint)
    weakref.finalize(events, ticket.release)
    return events


class LoopSink:
    """Events from the Runtime's reader thread straight onto the event loop: no thread-pool
    hop per token (on 2 cores, every bit of the server's CPU is taken from decoding)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Event] = asyncio.Queue()

    def put(self, event: Event) -> None:
        self._loop.call_soon_threadsafe(self.queue.put_nowait, event)


async def _events(ticket: Ticket, metrics: Metrics, model: str, generation: Generation,
                  sink: LoopSink, endpoint: str) -> AsyncIterator[Event]:
    started = time.monotonic()
    finished = False
    try:
        while not finished:
            event = await sink.queue.get()
            finished = isinstance(event, DoneEvent | ErrorEvent)
            if isinstance(event, DoneEvent):
                metrics.record(endpoint, model, event.stats, time.monotonic() - started)
                access_log.note_usage(event.stats)
            elif isinstance(event, ErrorEvent):
                metrics.record_error(endpoint, event.kind)
                access_log.note_error(event.kind)
            yield event
    finally:
        if not finished:  # the client went away: stop the work now
            generation.cancel()
        generation.close()
        ticket.release()


async def embed(request: Request, model: str, texts: list[str]) -> tuple[list[list[float]], int]:
    """Embeddings through the Runtime (in a thread: loading and decoding block)."""
    state = request.app.state
    if len(texts) > MAX_EMBED_INPUTS:
        raise InvalidRequestError(f"at most {MAX_EMBED_INPUTS} inputs per request")
    with state.admission.admit():
        vectors, tokens = await anyio.to_thread.run_sync(state.runtime.embed, model, texts)
    access_log.note_prompt_tokens(tokens)
    return vectors, tokens


def check_remote_media(runtime: Runtime, model: str, request: GenerationRequest) -> None:
    """A remote model gets a chat's images and audio as OpenAI content parts (whether it
    sees is its server's to say); a raw prompt's cannot go to one."""
    if request.media and runtime.is_remote(model):
        raise InvalidRequestError(f"{model} is a remote model: a raw prompt cannot carry "
                                  "images or audio to it; send them in a chat's messages")


async def count_prompt_tokens(state: State, model: str, request: GenerationRequest,
                              backend: str | None = None) -> int:
    """The length of the request's prompt for `model` (Runtime.count_prompt_tokens), after
    the same checks a generation gets first (400, 404, then 429 when the queue is full):
    counting may load the model, so it takes its turn like any request."""
    request.validate()
    if backend is not None:
        check_backend(backend)
    runtime = state.runtime
    check_remote_media(runtime, model, request)
    with state.admission.admit():
        await anyio.to_thread.run_sync(runtime.check_model, model)
        if media_of(request) and not runtime.is_remote(model):
            serving = await anyio.to_thread.run_sync(runtime.serving, model, backend)
            check_media(request, serving, model)
        tokens = await anyio.to_thread.run_sync(runtime.count_prompt_tokens, model, request,
                                                backend)
    access_log.note_prompt_tokens(tokens)
    return tokens


@with_mcp  # `ember serve --mcp`: a request that asks gets the MCP servers' tools
async def open_events(state: State, model: str, request: GenerationRequest, endpoint: str,
                      keep_alive_s: float | None = None, backend: str | None = None, *,
                      context: int | None = None) -> AsyncIterator[Event]:
    """Check the request and the model (400, 404 and 429 come here, before any response has
    started), then the generation's events. `backend` is the request's choice of backend
    for a local model, `context` the context it asks to load it with (Ollama's num_ctx);
    a local model's request must fit what that backend and context can do
    (app.server.serving), and its prompt the context it is loaded with, or the largest one
    this machine gives it (Runtime.submit). The model checks run in a thread: for a
    remote model it asks the remote server, a local one they load."""
    request.validate()
    if backend is not None:
        check_backend(backend)
    spec = request.speculative
    if spec is not None and spec.by_default and not state.settings.speculation:
        request = replace(request, speculative=None)  # `ember serve --no-speculation`
    ticket = state.admission.admit()  # before any load or count: a 429 costs nothing
    try:
        return await _checked_events(state, ticket, model, request, endpoint, keep_alive_s,
                                     backend, context)
    except BaseException:
        ticket.release()
        raise


async def _checked_events(state: State, ticket: Ticket, model: str, request: GenerationRequest,
                          endpoint: str, keep_alive_s: float | None, backend: str | None,
                          context: int | None) -> AsyncIterator[Event]:
    runtime = state.runtime
    check_remote_media(runtime, model, request)
    if runtime.is_remote(model) and request.logprobs is not None:
        raise InvalidRequestError(f"{model} is a remote model, whose logprobs Ember does not "
                                  "pass on yet: ask without them", "logprobs")
    sink = LoopSink()

    def check(serving: Serving) -> None:
        check_serving(request, serving, model)

    # One Runtime entry: resolves the model, checks it (a remote server checks its own
    # limits), loads it, and reloads it with a larger context when the prompt needs one (a
    # 400 here when no context this machine allows holds it: never cut, never a 200 that
    # fails inside its stream); the worker has counted the prompt when it returns.
    generation = await anyio.to_thread.run_sync(
        lambda: runtime.submit(model, request, sink, backend, context, keep_alive_s, check))
    admitted = generation.admitted
    _counted_prompt.set(admitted.prompt_tokens if admitted is not None else None)
    return stream_events(ticket, state.metrics, model, generation, sink, endpoint)


async def collect(http: Request, events: AsyncIterator[Event]) -> DoneEvent:
    """The whole answer of a non-streaming request: its DoneEvent, which carries the answer's
    text, thinking and tool calls (the sum of the events streamed); an error event becomes
    its ApiError. Ends early (ClientGoneError) when the client goes away."""
    from app.server.errors import error_for_event

    async def final() -> DoneEvent:
        async for event in events:
            if isinstance(event, ErrorEvent):
                raise error_for_event(event)
            if isinstance(event, DoneEvent):
                return event
        raise RuntimeError("stream ended without a final event")

    try:
        return await until_disconnected(http, final)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
