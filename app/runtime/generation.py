"""One request's stream of events, as front ends consume it."""

from __future__ import annotations

import contextlib
import queue
import threading
import uuid
from collections.abc import Iterator
from typing import Protocol

from app.errors import WorkerCrashedError
from app.runtime.worker_handle import EventSink, StreamSink
from backends.base import (
    Admission,
    Admitted,
    DoneEvent,
    ErrorEvent,
    Event,
    GenerationRequest,
    PromptTooLong,
    Stats,
)
from backends.errors import BackendError, EmberError, InvalidRequestError


class StreamHost(Protocol):
    """Where a generation runs: a worker process (app.runtime.worker_handle.Worker) or the app's
    own process for remote models (app.runtime.remote_streams.RemoteStreams)."""
    @property
    def label(self) -> str: ...
    @property
    def running(self) -> bool: ...
    def open_stream(self, stream_id: str, request: GenerationRequest, sink: StreamSink) -> None: ...
    def close_stream(self, stream_id: str) -> None: ...
    def cancel(self, stream_id: str) -> None: ...


class _Gate:
    """A stream's sink that keeps its Admission (a local backend's first event) for the
    Runtime and passes every other event on. A first event that is no Admission (a crash, a
    request the backend refused) goes on to the stream and opens the gate too."""

    def __init__(self, sink: EventSink, hold: bool) -> None:
        self._sink = sink
        self._hold = hold  # PromptTooLong is the Runtime's to act on (Runtime.submit)
        self.admission: Admission | None = None
        self.opened = threading.Event()

    def put(self, event: Event | Admission) -> None:
        if isinstance(event, PromptTooLong) and not self._hold:
            # no one applies a context policy: the stream ends with its error (the 400's)
            self._sink.put(ErrorEvent(event.message, "invalid"))
            self.admission = event
        elif isinstance(event, Admitted | PromptTooLong):
            self.admission = event
        else:
            self._sink.put(event)
        if not self.opened.is_set():  # once: every token passes here
            self.opened.set()


class Generation:
    """A stream of events from one request; iterate it, or call `result()`. `cancel()` stops it.
    With a `sink`, events go there instead (for async consumers); call `close()` when done."""

    def __init__(self, worker: StreamHost, request: GenerationRequest,
                 sink: EventSink | None = None, hold_too_long: bool = False) -> None:
        self.request = request
        self.stream_id = uuid.uuid4().hex
        self._worker = worker
        self._events: queue.Queue[Event] | None = None  # what iterating reads (no sink given)
        if sink is None:
            sink = self._events = queue.Queue()
        self._gate = _Gate(sink, hold_too_long)
        worker.open_stream(self.stream_id, request, self._gate)
        self._finished = False
        self._closed = False  # the stream was given back: nothing more can arrive

    def admission(self) -> Admission | None:
        """Wait for the stream's first event: the Admission a local backend sends once it
        has rendered and tokenized the prompt (None when the first event was something
        else, left on the stream, or the worker stopped)."""
        while not self._gate.opened.wait(0.5):
            if not self._worker.running:
                return None
        return self._gate.admission

    @property
    def admitted(self) -> Admitted | None:
        """The prompt this generation runs, as its backend counted it (local models)."""
        admission = self._gate.admission
        return admission if isinstance(admission, Admitted) else None

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


