"""The Runtime: the one API front ends use to list, load, generate, cancel and unload.

Each loaded model runs in a worker process (multiprocessing, spawn). A crash in native code
kills only the worker: requests in flight end with an ErrorEvent(kind="crash") that says so,
and the next request for that model starts a fresh worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from app.errors import BackendError, EmberError, InvalidRequestError, WorkerCrashedError
from app.fit import memory_budget, plan_load
from app.gguf_file import read_gguf
from app.hardware import HardwareProfile, detect
from app.runtime.protocol import (
    Cancel,
    Embed,
    Generate,
    Loaded,
    LoadFailed,
    Out,
    OutBatch,
    Reply,
    Shutdown,
    Tokenize,
)
from app.runtime.worker import worker_main
from app.store import InstalledModel, Store
from backends.base import DoneEvent, ErrorEvent, Event, GenerationRequest, LoadPlan, Stats

LOAD_TIMEOUT_S = 300.0


def _exit_description(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped responding"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class Worker:
    """The parent's side of one worker process."""

    def __init__(self, model: InstalledModel, plan: LoadPlan, backend: str) -> None:
        self.model, self.plan, self.backend = model, plan, backend
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, backend, model, plan),
                                   daemon=True, name=f"ember-worker-{model.id}")
        self.process.start()
        child.close()
        self._send_lock = threading.Lock()
        self._streams: dict[str, queue.Queue[Event]] = {}
        self._replies: dict[str, queue.Queue[Reply]] = {}
        self._streams_lock = threading.Lock()
        self.alive = False
        self.last_used = time.monotonic()
        self.keep_alive_s: float | None = None  # None: the Runtime's default idle TTL
        self._wait_loaded()
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"ember-runtime-{model.id}")
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def _wait_loaded(self) -> None:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._conn.poll(0.2):
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    break
                if isinstance(msg, Loaded):
                    self.alive = True
                    return
                if isinstance(msg, LoadFailed):
                    self.process.join(5)
                    raise BackendError(f"could not load {self.model.ref}: {msg.message}")
            elif not self.process.is_alive():
                break
        self.process.join(1)
        if self.process.is_alive():
            self.process.kill()
        raise WorkerCrashedError(f"the worker loading {self.model.ref} "
                                 f"{_exit_description(self.process.exitcode)}")

    def _read(self) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                break
            if isinstance(msg, OutBatch):
                with self._streams_lock:
                    targets = [(self._streams.get(sid), event) for sid, event in msg.events]
                for stream, event in targets:
                    if stream is not None:
                        stream.put(event)
            elif isinstance(msg, Out):
                with self._streams_lock:
                    stream = self._streams.get(msg.stream_id)
                if stream is not None:
                    stream.put(msg.event)
            elif isinstance(msg, Reply):
                with self._streams_lock:
                    waiter = self._replies.get(msg.call_id)
                if waiter is not None:
                    waiter.put(msg)
        self.alive = False
        self.process.join(2)
        why = (f"the worker running {self.model.ref} {_exit_description(self.process.exitcode)}"
               "; this request failed, and the model will be reloaded on the next request")
        with self._streams_lock:
            for stream in self._streams.values():
                stream.put(ErrorEvent(why, "crash"))
            for waiter in self._replies.values():
                waiter.put(Reply("", error=why))

    def send(self, msg: object) -> None:
        with self._send_lock:
            self._conn.send(msg)

    def open_stream(self, stream_id: str, request: GenerationRequest,
                    sink: EventSink | None = None) -> EventSink:
        stream: EventSink = sink if sink is not None else queue.Queue()
        with self._streams_lock:
            self._streams[stream_id] = stream
        if not self.alive:
            stream.put(ErrorEvent(f"the worker running {self.model.ref} is not running", "crash"))
            return stream
        try:
            self.send(Generate(stream_id, request))
        except (BrokenPipeError, OSError):
            stream.put(ErrorEvent(f"the worker running {self.model.ref} is gone", "crash"))
        self.last_used = time.monotonic()
        return stream

    def close_stream(self, stream_id: str) -> None:
        with self._streams_lock:
            self._streams.pop(stream_id, None)
        self.last_used = time.monotonic()  # idle time counts from the end of a request

    @property
    def busy(self) -> bool:
        with self._streams_lock:
            return bool(self._streams or self._replies)

    def call(self, make: Callable[[str], object], timeout: float = 120.0) -> object:
        """Send a command that gets one Reply (tokenize, embed) and wait for it."""
        call_id = uuid.uuid4().hex
        waiter: queue.Queue[Reply] = queue.Queue()
        with self._streams_lock:
            self._replies[call_id] = waiter
        try:
            self.send(make(call_id))
            reply = waiter.get(timeout=timeout)
        finally:
            with self._streams_lock:
                self._replies.pop(call_id, None)
            self.last_used = time.monotonic()
        if reply.error:
            raise (InvalidRequestError if reply.invalid else BackendError)(reply.error)
        return reply.value

    def stop(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.send(Shutdown())
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._conn.close()


class EventSink(Protocol):
    """Where a stream's events go: a queue.Queue, or an asyncio adapter (app.server)."""
    def put(self, event: Event) -> None: ...


class Generation:
    """A stream of events from one request; iterate it, or call `result()`. `cancel()` stops it.
    With a `sink`, events go there instead (for async consumers); call `close()` when done."""

    def __init__(self, worker: Worker, request: GenerationRequest,
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
                    if not self._worker.process.is_alive() and not self._worker.alive:
                        self._finished = True
                        yield ErrorEvent(f"the worker running {self._worker.model.ref} stopped",
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
            self._worker.send(Cancel(self.stream_id))

    def result(self) -> tuple[str, Stats]:
        for event in self:
            if isinstance(event, DoneEvent):
                return event.text, event.stats
            if isinstance(event, ErrorEvent):
                cls = WorkerCrashedError if event.kind == "crash" else BackendError
                if event.kind == "invalid":
                    cls = InvalidRequestError
                raise cls(event.message)
        raise BackendError("the stream ended without a result")


@dataclass(frozen=True)
class LoadedModel:
    model: InstalledModel
    plan: LoadPlan
    backend: str
    pid: int | None


class Runtime:
    def __init__(self, store: Store | None = None, hardware: HardwareProfile | None = None,
                 backend: str = "llamacpp", idle_ttl_s: float | None = None,
                 parallel: int = 1) -> None:
        self.store = store or Store()
        self.parallel = parallel  # sequences decoded together per model (the fit may cut it)
        self._hardware = hardware
        self.backend = backend
        self.idle_ttl_s = idle_ttl_s  # None: models stay loaded until unloaded
        self._workers: dict[str, Worker] = {}
        self._lock = threading.Lock()

    @property
    def hardware(self) -> HardwareProfile:
        if self._hardware is None:
            self._hardware = detect()
        return self._hardware

    def list_models(self) -> list[InstalledModel]:
        return self.store.list()

    def loaded(self) -> list[LoadedModel]:
        with self._lock:
            return [LoadedModel(w.model, w.plan, w.backend, w.pid)
                    for w in self._workers.values() if w.alive]

    def load(self, name: str, context: int | None = None) -> LoadedModel:
        model = self.store.get(name)
        with self._lock:
            worker = self._workers.get(model.ref)
            if worker is not None and worker.alive and (context is None
                                                        or worker.plan.context == context):
                return LoadedModel(model, worker.plan, worker.backend, worker.pid)
            if worker is not None:
                worker.stop()
                del self._workers[model.ref]
            info = read_gguf(model.path)  # a clear error here beats a native crash later
            plan = plan_load(info, self.hardware, context, self.parallel)
            self._make_room(plan.memory_bytes)
            worker = Worker(model, plan, self.backend)
            self._workers[model.ref] = worker
            return LoadedModel(model, plan, worker.backend, worker.pid)

    def _make_room(self, needed: int) -> None:
        """Unload idle models, least recently used first, until `needed` fits beside the rest
        in the fit model's budget. Called with the lock held. Busy models are never evicted."""
        budget = memory_budget(self.hardware)
        in_use = sum(w.plan.memory_bytes for w in self._workers.values())
        for ref, w in sorted(self._workers.items(), key=lambda kv: kv[1].last_used):
            if in_use + needed <= budget:
                return
            if w.busy:
                continue
            w.stop()
            del self._workers[ref]
            in_use -= w.plan.memory_bytes

    def _worker(self, name: str) -> Worker:
        model = self.store.get(name)
        with self._lock:
            worker = self._workers.get(model.ref)
        if worker is None or not worker.alive:
            self.load(name, worker.plan.context if worker else None)
            with self._lock:
                worker = self._workers[model.ref]
        return worker

    def generate(self, name: str, request: GenerationRequest,
                 sink: EventSink | None = None) -> Generation:
        request.validate()
        return Generation(self._worker(name), request, sink)

    def tokenize(self, name: str, text: str) -> list[int]:
        return list(self._worker(name).call(lambda cid: Tokenize(cid, text)))  # type: ignore[call-overload]

    def embed(self, name: str, texts: list[str]) -> tuple[list[list[float]], int]:
        """L2-normalised embeddings of `texts`, and the number of tokens read."""
        if not texts:
            raise InvalidRequestError("no input to embed")
        return self._worker(name).call(lambda cid: Embed(cid, tuple(texts)))  # type: ignore[return-value]

    def keep_alive(self, name: str, seconds: float | None) -> None:
        """How long this model stays loaded after its last request (None: the default;
        a negative value: forever; 0: unload as soon as it is idle)."""
        model = self.store.get(name)
        with self._lock:
            worker = self._workers.get(model.ref)
        if worker is not None:
            worker.keep_alive_s = seconds

    def unload_idle(self) -> list[str]:
        """Unload models idle past their keep-alive; returns their refs."""
        now = time.monotonic()
        gone = []
        with self._lock:
            for ref, w in list(self._workers.items()):
                ttl = w.keep_alive_s if w.keep_alive_s is not None else self.idle_ttl_s
                if ttl is None or ttl < 0 or w.busy:
                    continue
                if now - w.last_used >= ttl or not w.alive:
                    gone.append((ref, self._workers.pop(ref)))
        for _, w in gone:
            w.stop()
        return [ref for ref, _ in gone]

    def unload(self, name: str) -> bool:
        model = self.store.get(name)
        with self._lock:
            worker = self._workers.pop(model.ref, None)
        if worker is None:
            return False
        worker.stop()
        return True

    def shutdown(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for w in workers:
            w.stop()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


__all__ = ["EmberError", "Generation", "LoadedModel", "Runtime"]
