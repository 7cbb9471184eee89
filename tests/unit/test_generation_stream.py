"""Generation: Ctrl+C while a front end iterates, wherever it lands, ends in a finished drain."""

from __future__ import annotations

import threading
import time

import pytest

from app.runtime.generation import Generation
from app.runtime.worker_handle import EventSink
from backends.base import DoneEvent, GenerationRequest, Message, Stats, TokenEvent


class TickingHost:
    """A stream host like the worker handle: a token every few milliseconds until the stream
    is cancelled, then its final event; events for a closed stream are dropped."""

    label = "ticking host"
    running = True

    def __init__(self) -> None:
        self._sinks: dict[str, EventSink] = {}
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()

    def open_stream(self, stream_id: str, request: GenerationRequest, sink: EventSink) -> None:
        self._sinks[stream_id] = sink
        threading.Thread(target=self._run, args=(stream_id,), daemon=True).start()

    def _deliver(self, stream_id: str, event: object) -> None:
        with self._lock:
            sink = self._sinks.get(stream_id)
        if sink is not None:
            sink.put(event)  # type: ignore[arg-type]

    def _run(self, stream_id: str) -> None:
        n = 0
        while stream_id not in self._cancelled and n < 5000:
            self._deliver(stream_id, TokenEvent("x"))
            n += 1
            time.sleep(0.002)
        stats = Stats(prompt_tokens=1, completion_tokens=n, ttft_s=0.0,
                      decode_tokens_per_s=0.0, finish_reason="cancelled", truncated=False,
                      total_s=0.0)
        self._deliver(stream_id, DoneEvent(stats, "x" * n))

    def close_stream(self, stream_id: str) -> None:
        with self._lock:
            self._sinks.pop(stream_id, None)

    def cancel(self, stream_id: str) -> None:
        self._cancelled.add(stream_id)


def _request() -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", "hi"),))


@pytest.mark.parametrize("where", ["loop body", "waiting for an event"])
def test_a_drain_after_ctrl_c_finishes_wherever_it_landed(where: str) -> None:
    host = TickingHost()
    generation = Generation(host, _request())
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        for seen, _event in enumerate(generation):
            if seen == 20:
                if where == "loop body":
                    raise KeyboardInterrupt  # as if the signal arrived while printing
                host_get = generation._events.get  # type: ignore[union-attr]

                def interrupted(*args: object, **kwargs: object) -> object:
                    raise KeyboardInterrupt

                generation._events.get = interrupted  # type: ignore[union-attr,method-assign]
    if where == "waiting for an event":
        generation._events.get = host_get  # type: ignore[union-attr,method-assign]
    generation.cancel()
    finished = threading.Event()
    threading.Thread(target=lambda: (generation.drain(), finished.set()), daemon=True).start()
    assert finished.wait(5), "the drain waited for events of a stream that was given back"
    assert time.monotonic() - started < 5
