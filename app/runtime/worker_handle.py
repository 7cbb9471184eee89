"""The parent's side of one worker process: start it, wait for the load, route its events
to the right stream, and notice when it dies (every request in flight then ends with an
ErrorEvent(kind="crash") that names the model and the signal)."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import queue
import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar, cast

from app import logs
from app.errors import WorkerCrashedError
from app.runtime.backend_table import capabilities
from app.runtime.protocol import (
    Call,
    Cancel,
    Generate,
    Loaded,
    LoadFailed,
    Log,
    Out,
    OutBatch,
    Reply,
    Shutdown,
)
from app.runtime.worker_main import worker_main
from app.store import InstalledModel
from backends.base import Admission, ErrorEvent, Event, GenerationRequest, LoadPlan
from backends.errors import BackendError, InvalidRequestError

LOAD_TIMEOUT_S = 300.0
log = logging.getLogger(__name__)
T = TypeVar("T")


class EventSink(Protocol):
    """Where a stream's events go: a queue.Queue, or an asyncio adapter (app.server)."""
    def put(self, event: Event) -> None: ...


class StreamSink(Protocol):
    """What a worker's stream is read into: its events, and first its Admission
    (app.runtime.generation takes that one for the Runtime)."""
    def put(self, event: Event | Admission) -> None: ...


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
        # the GPU layers asked for: the plan loaded may have fewer (the GPU could not hold
        # them, or is gone), and asking again for the same must not reload it each time
        self.asked_gpu_layers = plan.gpu_layers
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main,
                                   args=(child, backend, model, plan, logs.level()),
                                   daemon=True, name=f"ember-worker-{model.id}")
        started = time.monotonic()
        self.process.start()
        child.close()
        log.info("worker pid %s started for %s on %s", self.pid, model.ref, backend)
        self._send_lock = threading.Lock()
        self._streams: dict[str, StreamSink] = {}
        self._replies: dict[str, queue.Queue[Reply]] = {}
        self._streams_lock = threading.Lock()
        self.alive = False
        self.capabilities = capabilities(backend)  # until the worker reports its own
        self.last_used = time.monotonic()
        self.keep_alive_s: float | None = None  # None: the Runtime's default idle TTL
        self._stopping = False  # stop() was called: the end of the pipe is no crash
        self.drafts: dict[str, int] = {}  # draft models it may keep loaded -> their bytes
        self._wait_loaded()
        log.info("loaded %s on %s in %.2f s: context %d, %d threads, %d GPU layers, "
                 "parallel %d%s, %.2f GB planned (worker pid %s)", model.ref, backend,
                 time.monotonic() - started, self.plan.context, self.plan.threads,
                 self.plan.gpu_layers, self.plan.parallel,
                 f", weights packed {plan.quant}" if plan.quant else "",
                 self.plan.memory_bytes / 1e9, self.pid)
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"ember-runtime-{model.id}")
        self._reader.start()

    @property
    def memory_bytes(self) -> int:
        """What the memory budget counts for it: its plan, and its draft models' weights."""
        return self.plan.memory_bytes + sum(self.drafts.values())

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def label(self) -> str:
        return self.model.ref

    @property
    def running(self) -> bool:
        return self.alive or self.process.is_alive()

    def cancel(self, stream_id: str) -> None:
        self.send(Cancel(stream_id))

    def _wait_loaded(self) -> None:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._conn.poll(0.2):
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    break
                if isinstance(msg, Log):
                    logs.handle_forwarded(msg.record)
                elif isinstance(msg, Loaded):
                    self.capabilities = msg.capabilities
                    if msg.plan is not None:  # e.g. fewer GPU layers: its reason says why
                        self.plan = msg.plan
                    self.alive = True
                    return
                elif isinstance(msg, LoadFailed):
                    self.process.join(5)
                    log.warning("could not load %s on %s (worker pid %s): %s", self.model.ref,
                                self.backend, self.pid, msg.message)
                    raise BackendError(f"could not load {self.model.ref}: {msg.message}")
            elif not self.process.is_alive():
                break
        self.process.join(1)
        if self.process.is_alive():
            self.process.kill()
        why = _exit_description(self.process.exitcode)
        log.error("the worker (pid %s) loading %s on %s %s", self.pid, self.model.ref,
                  self.backend, why)
        raise WorkerCrashedError(f"the worker loading {self.model.ref} {why}")

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
            elif isinstance(msg, Log):
                logs.handle_forwarded(msg.record)
        self.alive = False
        self.process.join(2)
        how = _exit_description(self.process.exitcode)
        why = (f"the worker running {self.model.ref} {how}"
               "; this request failed, and the model will be reloaded on the next request")
        if not self._stopping:
            with self._streams_lock:
                failed = len(self._streams) + len(self._replies)
            log.error("worker pid %s running %s on %s %s; requests in flight failed: %d",
                      self.pid, self.model.ref, self.backend, how, failed)
        with self._streams_lock:
            for stream in self._streams.values():
                stream.put(ErrorEvent(why, "crash"))
            for waiter in self._replies.values():
                waiter.put(Reply("", error=why))

    def send(self, msg: object) -> None:
        with self._send_lock:
            self._conn.send(msg)

    def open_stream(self, stream_id: str, request: GenerationRequest, sink: StreamSink) -> None:
        with self._streams_lock:
            self._streams[stream_id] = sink
        if not self.alive:
            sink.put(ErrorEvent(f"the worker running {self.model.ref} is not running", "crash"))
            return
        try:
            self.send(Generate(stream_id, request))
        except (BrokenPipeError, OSError):
            sink.put(ErrorEvent(f"the worker running {self.model.ref} is gone", "crash"))
        self.last_used = time.monotonic()

    def close_stream(self, stream_id: str) -> None:
        with self._streams_lock:
            self._streams.pop(stream_id, None)
        self.last_used = time.monotonic()  # idle time counts from the end of a request

    @property
    def busy(self) -> bool:
        with self._streams_lock:
            return bool(self._streams or self._replies)

    def call(self, make: Callable[[str], Call[T]], timeout: float = 120.0) -> T:
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
        # The pipe carries the value as an object; the worker answered a Call[T] with its
        # backend's method of that name, which returns a T.
        return cast(T, reply.value)

    def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(BrokenPipeError, OSError):
            self.send(Shutdown())
        self.process.join(5)
        if self.process.is_alive():
            log.warning("worker pid %s running %s did not stop within 5 s: killed", self.pid,
                        self.model.ref)
            self.process.kill()
            self.process.join(5)
        self._reader.join(2)  # it reads to the end of the pipe: the worker's last log lines
        self._conn.close()


