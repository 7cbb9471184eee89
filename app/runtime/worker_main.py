"""The worker process: loads one model into one backend and serves requests from the pipe.

Two threads: a reader that takes commands off the pipe (so a Cancel arrives while a
generation runs) and the main thread that runs jobs and sends their results. Log records go
to the parent over the same pipe (app.logs), from whichever thread logs, so every send
holds one lock.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import Connection

from app import logs
from app.runtime.backend_table import make_backend
from app.runtime.protocol import (
    Cancel,
    CountPromptTokens,
    Detokenize,
    Embed,
    Generate,
    Loaded,
    LoadFailed,
    Log,
    Out,
    OutBatch,
    Reply,
    Shutdown,
    Tokenize,
)
from app.store import InstalledModel
from backends.base import Backend, DoneEvent, ErrorEvent, LoadPlan, PromptTooLong
from backends.errors import EmberError

log = logging.getLogger(__name__)


def _answer(backend: Backend,
            call: Tokenize | CountPromptTokens | Detokenize | Embed) -> object:
    """The value of a command that gets one Reply: its backend method's."""
    if isinstance(call, Tokenize):
        return backend.tokenize(call.text)
    if isinstance(call, CountPromptTokens):
        return backend.count_prompt_tokens(call.request)
    if isinstance(call, Detokenize):
        return [backend.detokenize(list(tokens)) for tokens in call.sequences]
    return backend.embed(list(call.texts))


def worker_main(conn: Connection, backend_name: str, model: InstalledModel,
                plan: LoadPlan, log_level: int = logging.WARNING) -> None:
    # Ctrl+C in a terminal reaches the whole process group; the parent decides what it means
    # (cancel the answer), so the worker must not die of it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    send_lock = threading.Lock()

    def send(msg: object) -> None:
        with send_lock:
            conn.send(msg)

    logs.setup_worker(lambda record: send(Log(record)), log_level)
    log.debug("loading %s into %s", model.ref, backend_name)
    started = time.monotonic()
    try:
        backend = make_backend(backend_name)
        changed = backend.load(model, plan)
    except Exception as e:  # any load failure is reported, never raised into the void
        if not isinstance(e, EmberError):  # a bug, not a bad file: keep its traceback
            log.exception("loading %s into %s failed", model.ref, backend_name)
        send(LoadFailed(str(e) if isinstance(e, EmberError) else f"{type(e).__name__}: {e}"))
        return
    log.debug("%s loaded into %s in %.2f s", model.ref, backend_name, time.monotonic() - started)
    send(Loaded(pid=os.getpid(), backend=backend.name, context=plan.context,
                capabilities=backend.capabilities(), plan=changed))

    def answer(call: Tokenize | CountPromptTokens | Detokenize | Embed) -> None:
        try:
            reply = Reply(call.call_id, value=_answer(backend, call))
        except EmberError as e:
            reply = Reply(call.call_id, error=str(e), invalid=True)
        except Exception as e:
            log.exception("%s failed", type(call).__name__.lower())
            reply = Reply(call.call_id, error=f"{type(e).__name__}: {e}")
        send(reply)

    jobs: queue.Queue[Generate | Tokenize | CountPromptTokens | Detokenize | Embed | Shutdown] = (
        queue.Queue())
    cancels: dict[str, threading.Event] = {}
    lock = threading.Lock()
    # Counting a prompt need not wait for the engine step that runs (a whole prompt batch can
    # take seconds): where the backend allows it, the reader answers it. (A generation counts
    # its own prompt in submit, its first step: its Admission is the stream's first event.)
    at_once = ((Tokenize, CountPromptTokens, Detokenize) if backend.tokenizes_while_stepping
               else ())

    def read_commands() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the parent went away: stop everything
                msg = Shutdown()
            if isinstance(msg, Shutdown):
                with lock:
                    for flag in cancels.values():
                        flag.set()
                jobs.put(msg)
                return
            if isinstance(msg, Generate):
                with lock:
                    cancels.setdefault(msg.stream_id, threading.Event())
                jobs.put(msg)
            elif isinstance(msg, Cancel):
                with lock:
                    if msg.stream_id in cancels:  # a finished stream has nothing to cancel
                        cancels[msg.stream_id].set()
            elif isinstance(msg, at_once):
                try:
                    answer(msg)
                except (BrokenPipeError, EOFError, OSError):
                    jobs.put(Shutdown())
                    return
            elif isinstance(msg, Tokenize | CountPromptTokens | Detokenize | Embed):
                jobs.put(msg)

    threading.Thread(target=read_commands, daemon=True, name="ember-worker-reader").start()
    # Drain every queued command, then take one engine step; block only when idle.
    while True:
        job: Generate | Tokenize | CountPromptTokens | Detokenize | Embed | Shutdown | None
        try:
            job = jobs.get(block=not backend.has_work())
        except queue.Empty:
            job = None  # no command waiting: time for an engine step
        if isinstance(job, Shutdown):
            break
        try:
            if isinstance(job, Tokenize | CountPromptTokens | Detokenize | Embed):
                answer(job)
            elif isinstance(job, Generate):
                with lock:
                    flag = cancels.setdefault(job.stream_id, threading.Event())
                try:
                    verdict = backend.submit(job.stream_id, job.request, flag)
                    send(Out(job.stream_id, verdict))  # the stream's first event
                    if isinstance(verdict, PromptTooLong):  # nothing queued: the stream ends
                        with lock:
                            cancels.pop(job.stream_id, None)
                except EmberError as e:
                    send(Out(job.stream_id, ErrorEvent(str(e), "invalid")))
                except Exception as e:
                    log.exception("starting a generation failed")
                    send(Out(job.stream_id, ErrorEvent(f"{type(e).__name__}: {e}")))
            else:
                try:
                    events = backend.step()
                except Exception as e:  # fail what was running, keep the worker
                    log.exception("an engine step failed: failing the requests it ran")
                    events = backend.fail_all(f"{type(e).__name__}: {e}")
                if events:
                    send(OutBatch(tuple(events)))
                for stream_id, event in events:
                    if isinstance(event, DoneEvent | ErrorEvent):
                        with lock:
                            cancels.pop(stream_id, None)
        except (BrokenPipeError, EOFError, OSError):
            break
    log.debug("unloading %s", model.ref)
    backend.unload()
