"""A Runtime stand-in for the server's unit tests: one local model, run by a backend with the
capabilities and context a test gives; each generation records its GenerationRequest and
answers with the events a test scripts, then the DoneEvent a backend's job would make of them
(backends.job.Answer), or the ErrorEvent of a backend that fails, so the routes' mapping and
wire shapes are tested without a model. Its prompt count is the prompt_tokens it reports."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace

from fastapi.testclient import TestClient

from app.errors import ModelNotFoundError
from app.runtime.runtime import Serving
from app.server.app import ServerSettings, create_app
from backends.base import (
    Admitted,
    Capabilities,
    DoneEvent,
    ErrorEvent,
    GenerationRequest,
    OutputEvent,
    ReasoningEvent,
    Stats,
)
from backends.job import Answer
from tests.support import LOOPBACK

MODEL = "tiny-chat"


@dataclass
class _Generation:
    admitted: Admitted | None = None

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class ScriptedRuntime:
    backend: str = "llamacpp"
    grammar: bool = True
    context: int = 4096
    script: list[OutputEvent] = field(default_factory=list)
    finish: str = "stop"  # the engine's own reason: stop or length
    cut_call: bool = False  # max_tokens cut the last call off (it is left out of the end)
    stop_sequence: str | None = None  # the stop string the engine says ended the answer
    prompt_tokens: int = 7
    fail: str | None = None  # the backend fails after the script: an ErrorEvent, no DoneEvent
    cached_tokens: int = 0
    requests: list[GenerationRequest] = field(default_factory=list)
    idle_ttl_s: float | None = None
    parallel: int = 1
    sees: bool = False  # the model has a projector (images), on a backend that runs one

    def __post_init__(self) -> None:
        self.store = SimpleNamespace(get=self._model)
        self._lock = threading.Lock()

    # -- what the server asks before it generates ------------------------------------------
    def _model(self, name: str, prefer: str | None = None) -> SimpleNamespace:
        if name.partition(":")[0] != MODEL:
            raise ModelNotFoundError(name, [])
        return SimpleNamespace(id=MODEL, ref=f"{MODEL}:Q4_K_M", chat=True)

    @staticmethod
    def is_remote(name: str) -> bool:
        return "/" in name

    def check_model(self, name: str) -> None:
        self._model(name)

    def serving(self, name: str, backend: str | None = None,
                context: int | None = None) -> Serving:
        return Serving(backend or self.backend,
                       Capabilities(formats=("gguf",), grammar=self.grammar, media=self.sees),
                       context or self.context, loaded=context is None, projector=self.sees)

    def fit_context(self, name: str, request: GenerationRequest, backend: str | None = None,
                    context: int | None = None) -> int:
        return self.prompt_tokens  # what its answers report: always fits

    # -- generating ------------------------------------------------------------------------
    def submit(self, name: str, request: GenerationRequest, sink, backend: str | None = None,
               context: int | None = None, keep_alive_s: float | None = None,
               check=None) -> _Generation:
        """Runtime.submit's steps, each one a method a test may script: the model checked
        (a remote name is the scripted runtime's 404 too), served (`check`), fitted, then
        generated, admitted with the fitted prompt's tokens."""
        request.validate()
        self.check_model(name)
        if check is not None:
            check(self.serving(name, backend, context))
        tokens = self.fit_context(name, request, backend, context)
        generation = self.generate(name, request, sink, backend)
        generation.admitted = Admitted(tokens)
        self.keep_alive(name, keep_alive_s)
        return generation

    def generate(self, name: str, request: GenerationRequest, sink,
                 backend: str | None = None) -> _Generation:
        with self._lock:
            self.requests.append(request)
        answer = Answer()
        for event in self.script:
            answer.add(event)
            sink.put(event)
        if self.fail is not None:
            sink.put(ErrorEvent(self.fail))
            return _Generation()
        calls = answer.tool_calls(drop_last=self.cut_call)
        reason = "tool_calls" if self.finish == "stop" and calls else self.finish
        stats = Stats(prompt_tokens=self.prompt_tokens, completion_tokens=len(self.script),
                      ttft_s=0.01, decode_tokens_per_s=50.0,
                      finish_reason=reason,  # type: ignore[arg-type]
                      truncated=False, total_s=0.1, cached_tokens=self.cached_tokens,
                      reasoning_tokens=sum(isinstance(e, ReasoningEvent) for e in self.script),
                      stop_sequence=self.stop_sequence)
        sink.put(DoneEvent(stats, "".join(answer.content), "".join(answer.reasoning), calls))
        return _Generation()

    def count_prompt_tokens(self, name: str, request: GenerationRequest,
                            backend: str | None = None) -> int:
        """What its generations report as prompt_tokens (a real model's count is the
        integration tests' business)."""
        request.validate()
        with self._lock:
            self.requests.append(request)
        return self.prompt_tokens

    # -- the rest of the Runtime the app touches -------------------------------------------
    def keep_alive(self, name: str, seconds: float | None) -> None:
        pass

    def load(self, *args: object, **kw: object) -> None:
        pass

    def loaded(self) -> list:
        return []

    def loading(self) -> list:
        return []

    def list_models(self) -> list:
        return []

    def remote_models(self) -> tuple[list, dict]:
        return [], {}

    def unload_idle(self) -> list[str]:
        return []

    def shutdown(self) -> None:
        pass


@contextmanager
def served(runtime: ScriptedRuntime, **settings: object) -> Iterator[TestClient]:
    """The real app on `runtime`, through Starlette's in-process client (an httpx.Client, so
    the official openai client can use it too)."""
    with TestClient(create_app(runtime, ServerSettings(**settings)),  # type: ignore[arg-type]
                    base_url=LOOPBACK) as client:
        yield client
