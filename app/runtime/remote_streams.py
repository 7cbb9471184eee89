"""Remote generations, hosted in the app's own process.

Why not a worker process like local backends: a worker exists to isolate native code (a
segfault in llama.cpp, MLX or CUDA must not take the app down). The remote backend is pure
Python over httpx: its failures are exceptions, which become ErrorEvents here, and it holds
no model memory. A process per remote model would cost a spawn (about a second) and tens of
MB each, for nothing isolated. So each request runs on its own thread, and its events go to
the same kind of stream a worker feeds, so `Generation` and every front end treat both alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app import config
from app.errors import ModelNotFoundError
from app.registry import suggest
from app.runtime import endpoints
from app.runtime.thinking import ThinkingSupport, remote_support
from app.runtime.worker_handle import EventSink
from backends.base import DoneEvent, ErrorEvent, Event, GenerationRequest, ReasoningEvent
from backends.errors import EmberError
from backends.remote import Endpoint, Received, RemoteBackend, RemoteModel

LIST_TTL_S = 10.0


@dataclass
class _Stream:
    sink: EventSink
    received: Received
    flag: threading.Event = field(default_factory=threading.Event)
    ended: bool = False  # its final event was delivered: later events are dropped


class RemoteStreams:
    """The host of one remote model's generations (the counterpart of a Worker)."""
    running = True  # nothing to die: a failure is an ErrorEvent on its own stream

    def __init__(self, backend: RemoteBackend, model: str,
                 on_thinking: Callable[[], None] | None = None) -> None:
        self.backend, self.model = backend, model
        self.on_thinking = on_thinking  # called at a stream's first thinking
        self.label = f"{backend.endpoint.name}/{model}"
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()

    def open_stream(self, stream_id: str, request: GenerationRequest, sink: EventSink) -> None:
        stream = _Stream(sink, Received(time.monotonic()))
        with self._lock:
            self._streams[stream_id] = stream
        threading.Thread(target=self._run, args=(stream_id, request, stream),
                         daemon=True, name=f"ember-remote-{self.label}").start()

    def _run(self, stream_id: str, request: GenerationRequest, stream: _Stream) -> None:
        try:
            for event in self.backend.generate(self.model, request, stream.flag):
                if not self._deliver(stream, event):
                    return  # cancelled: leaving closes the response, the server stops
        except Exception as e:  # a bug of ours must still end the stream, not hang it
            self._deliver(stream, ErrorEvent(f"{self.label}: {type(e).__name__}: {e}"))
        finally:
            with self._lock:
                self._streams.pop(stream_id, None)

    def _deliver(self, stream: _Stream, event: Event) -> bool:
        with self._lock:
            if stream.ended:
                return False
            if isinstance(event, ReasoningEvent) and not stream.received.reasoning \
                    and self.on_thinking is not None:
                self.on_thinking()
            # kept so that a cancel's DoneEvent has the text, thinking and calls so far
            stream.received.record(event)
            stream.ended = isinstance(event, DoneEvent | ErrorEvent)
            stream.sink.put(event)
            return True

    def cancel(self, stream_id: str) -> None:
        """End the stream now, as cancelled. The request's thread may be blocked reading a
        stalled server; it notices the flag at the next line (or its read timeout), then
        closes the response, which tells the server to stop."""
        with self._lock:
            stream = self._streams.get(stream_id)
        if stream is None:
            return
        stream.flag.set()
        stream.received.finish = "cancelled"
        self._deliver(stream, stream.received.done())

    def close_stream(self, stream_id: str) -> None:
        self.cancel(stream_id)  # a consumer that stops listening stops the request too


class Remotes:
    """The Runtime's side of remote endpoints: one client per endpoint (remade when
    config.toml changes it), their model lists, and a host for each request."""

    def __init__(self, paths: config.Paths) -> None:
        self.paths = paths
        self._clients: dict[str, RemoteBackend] = {}
        self._listed: dict[str, tuple[float, list[str]]] = {}  # endpoint -> (when, ids)
        self._described: dict[str, tuple[list[str] | None, str | None]] = {}  # ref ->
        self._seen_thinking: set[str] = set()  # refs that streamed thinking
        self._lock = threading.Lock()

    def _client(self, endpoint: Endpoint) -> RemoteBackend:
        with self._lock:
            client = self._clients.get(endpoint.name)
            if client is None or client.endpoint != endpoint:
                if client is not None:
                    client.close()
                client = self._clients[endpoint.name] = RemoteBackend(endpoint)
            return client

    def models(self) -> tuple[list[RemoteModel], dict[str, str]]:
        """Every endpoint's models, and for an endpoint that could not list them, why (one
        unreachable server must not hide the others' models, nor the local ones)."""
        found, failed = [], {}
        for endpoint in endpoints.endpoints(self.paths).values():
            try:
                found += self._client(endpoint).list_models()
            except EmberError as e:
                failed[endpoint.name] = str(e)
        return found, failed

    def _ids(self, endpoint: Endpoint) -> list[str]:
        """The endpoint's model ids, remembered for LIST_TTL_S: a server checks the model of
        every request, and a round trip each time would add to every answer."""
        now = time.monotonic()
        with self._lock:
            seen = self._listed.get(endpoint.name)
        if seen is not None and now - seen[0] < LIST_TTL_S:
            return seen[1]
        ids = [m.id for m in self._client(endpoint).list_models()]
        with self._lock:
            self._listed[endpoint.name] = (now, ids)
        return ids

    def check(self, ref: str) -> None:
        """ModelNotFoundError for an unknown endpoint or model; RemoteError if unreachable."""
        endpoint, model = endpoints.resolve(ref, self.paths)
        ids = self._ids(endpoint)
        if model not in ids:
            raise ModelNotFoundError(model, suggest(model, ids), f"remote {endpoint.name!r}")

    def host(self, ref: str) -> RemoteStreams:
        endpoint, model = endpoints.resolve(ref, self.paths)
        return RemoteStreams(self._client(endpoint), model,
                             on_thinking=lambda: self._saw_thinking(ref))

    def _saw_thinking(self, ref: str) -> None:
        with self._lock:
            self._seen_thinking.add(ref)

    def thinking_support(self, ref: str) -> ThinkingSupport:
        """What the upstream says of the model (network; remembered once it has said
        something), or that it streamed thinking."""
        described = self._describe(ref)
        with self._lock:
            seen = ref in self._seen_thinking
        return remote_support(*described, seen_thinking=seen)

    def sees(self, ref: str) -> bool | None:
        """Whether the upstream lists `vision` for the model (Ollama's and Ember's
        /api/show); None when it lists no capabilities (vLLM, OpenAI): its server decides
        when an image comes."""
        capabilities, _ = self._describe(ref)
        return None if capabilities is None else "vision" in capabilities

    def _describe(self, ref: str) -> tuple[list[str] | None, str | None]:
        """The upstream's capabilities and template for `ref` (network; remembered once it
        has said something)."""
        endpoint, model = endpoints.resolve(ref, self.paths)
        with self._lock:
            described = self._described.get(ref)
        if described is None:
            described = self._client(endpoint).describe(model)
            if described != (None, None):  # nothing said may be a server down: ask again
                with self._lock:
                    self._described[ref] = described
        return described

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()
