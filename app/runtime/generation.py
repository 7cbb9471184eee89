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
from backends.errors import BackendError, EmberError, InvalidRequestError


class StreamHost(Protocol):
    """Where a generation runs: a worker process (app.runtime.worker_handle.Worker) or the app's
    own process for remote models (app.runtime.remote_streams.RemoteStreams)."""
    @property
    def label(self) -> str: ...
    @property
    def running(self) -> bool: ...
    def open_stream(self, stream_id: str, request: GenerationRequest, sink: EventSink) -> None: ...
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
        self._events: queue.Queue[Event] | None = None  # what iterating reads (no sink given)
        if sink is None:
            sink = self._events = queue.Queue()
        worker.open_stream(self.stream_id, request, sink)
        self._finished = False
        self._closed = False  # the stream was given back: nothing more can arrive

    def close(self) -> None:
        self._closed = True
        self._worker.close_stream(self.stream_id)

    def __iter__(self) -> Iterator[Event]:
        if self._events is None:
            raise TypeError("this generation's events go to the sink it was given")
        try:
            while not self._finished and not self._closed:
                try:
                    event = self._events.get(timeout=1.0)
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
            # (also when Ctrl+C lands in the consumer's loop body rather than in get(): the
            # loop's iterator is dropped, and a drain() after it must not wait for events
            # that no longer come)
            self.cancel()
            self.close()
            raise
        except BaseException:
            # e.g. Ctrl+C while waiting: cancel, but keep the stream so that iterating
            # again drains it to its final event.
            self.cancel()
            raise
        self._worker.close_stream(self.stream_id)

    def drain(self) -> None:
        """After `cancel()`: read the rest of the stream up to its final event, so the worker
        is done with it. Returns at once when the stream was already given back."""
        for _ in self:
            pass

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
                error: EmberError
                if event.kind == "crash":
                    error = WorkerCrashedError(event.message)
                elif event.kind == "invalid":
                    error = InvalidRequestError(event.message)
                else:
                    error = BackendError(event.message)
                    error.partial = event.partial
                raise error
        raise BackendError("the stream ended without a result")


