"""One request's stream of events, as front ends consume it."""

from __future__ import annotations

import contextlib
import queue
import uuid
from collections.abc import Iterator
from typing import Protocol

from app.errors import WorkerCrashedError
from app.runtime.worker_handle import EventSink
from backends.base import DoneEvent, ErrorEvent, Event, GenerationRequest, Stats
from backends.errors import BackendError, InvalidRequestError


class StreamHost(Protocol):
    """Where a generation runs: a worker process (app.runtime.worker_handle.Worker) or the app's
    own process for remote models (app.runtime.remote_streams.RemoteStreams)."""
    label: str

    @property
    def running(self) -> bool: ...
    def open_stream(self, stream_id: str, request: GenerationRequest,
                    sink: EventSink | None = None) -> EventSink: ...
    def close_stream(self, stream_id: str) -> None: ...
    def cancel(self, stream_id: str) -> None: ...


class Generation:
    """A stream of events from one request; iterate it, or call `result()`. `cancel()` stops it.
    With a `sink`, events go there instead (for async consumers); call `close()` when done."""

    def __init__(self, worker: StreamHost, request: GenerationRequest,
                 sink: EventSink | None = None) -> None:
        self.request = request
        self.stream_id = uuid.uuid4().hex
        self._worker = worker
        self._stream = worker.open_stream(self.stream_id, request, sink)
        self._finished = False

    def close(self) -> None:
        self._worker.close_stream(self.stream_id)

    def __iter__(self) -> Iterator[Event]:
        try:
            while not self._finished:
                try:
                    event = self._stream.get(timeout=1.0)
                except queue.Empty:
                    if not self._worker.running:
                        self._finished = True
                        yield ErrorEvent(f"the worker running {self._worker.label} stopped",
                                         "crash")
                    continue
                if isinstance(event, DoneEvent | ErrorEvent):
                    self._finished = True
                yield event
        except GeneratorExit:  # the consumer stopped early: stop the work too
            self.cancel()
            self._worker.close_stream(self.stream_id)
            raise
        except BaseException:
            # e.g. Ctrl+C while waiting: cancel, but keep the stream so that iterating
            # again drains it to its final event.
            self.cancel()
            raise
        self._worker.close_stream(self.stream_id)

    def cancel(self) -> None:
        if self._finished:
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            self._worker.cancel(self.stream_id)

    def result(self) -> tuple[str, Stats]:
        for event in self:
            if isinstance(event, DoneEvent):
                return event.text, event.stats
            if isinstance(event, ErrorEvent):
                cls = WorkerCrashedError if event.kind == "crash" else BackendError
                if event.kind == "invalid":
                    cls = InvalidRequestError
                error = cls(event.message)
                if isinstance(error, BackendError):
                    error.partial = event.partial
                raise error
        raise BackendError("the stream ended without a result")


