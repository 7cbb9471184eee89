"""Remote generations, hosted in the app's own process.

Why not a worker process like local backends: a worker exists to isolate native code (a
segfault in llama.cpp, MLX or CUDA must not take the app down). The remote backend is pure
Python over httpx: its failures are exceptions, which become ErrorEvents here, and it holds
no model memory. A process per remote model would cost a spawn (about a second) and tens of
MB each, for nothing isolated. So each request runs on its own thread, and its events go to
the same kind of stream a worker feeds, so `Generation` and every front end treat both alike.
"""

from __future__ import annotations

import queue
import threading

from app.runtime.process import EventSink
from backends.base import ErrorEvent, GenerationRequest
from backends.remote import RemoteBackend


class RemoteStreams:
    """The host of one remote model's generations (the counterpart of a Worker)."""
    running = True  # nothing to die: a failure is an ErrorEvent on its own stream

    def __init__(self, backend: RemoteBackend, model: str) -> None:
        self.backend, self.model = backend, model
        self.label = f"{backend.endpoint.name}/{model}"
        self._flags: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def open_stream(self, stream_id: str, request: GenerationRequest,
                    sink: EventSink | None = None) -> EventSink:
        stream: EventSink = sink if sink is not None else queue.Queue()
        flag = threading.Event()
        with self._lock:
            self._flags[stream_id] = flag
        threading.Thread(target=self._run, args=(stream_id, request, stream, flag),
                         daemon=True, name=f"ember-remote-{self.label}").start()
        return stream

    def _run(self, stream_id: str, request: GenerationRequest, stream: EventSink,
             flag: threading.Event) -> None:
        try:
            for event in self.backend.generate(self.model, request, flag):
                stream.put(event)
        except Exception as e:  # a bug of ours must still end the stream, not hang it
            stream.put(ErrorEvent(f"{self.label}: {type(e).__name__}: {e}"))
        finally:
            with self._lock:
                self._flags.pop(stream_id, None)

    def cancel(self, stream_id: str) -> None:
        with self._lock:
            flag = self._flags.get(stream_id)
        if flag is not None:
            flag.set()

    def close_stream(self, stream_id: str) -> None:
        self.cancel(stream_id)  # a consumer that stops listening stops the request too
