"""One log line per HTTP request, written when it ends:

    request 5f0c2a9e POST /v1/chat/completions model=qwen2.5-coder-0.5b-instruct status=200
    finish=stop prompt_tokens=31 completion_tokens=12 seconds=0.84

A pure ASGI middleware, outermost, so that requests the Guard refuses (401, 413) are counted
too. It gives each request an id (also sent back as `X-Request-ID`) and a `RequestLog` in a
context variable; the routes and app.server.bridge note the model and the usage there as they
learn them (a streamed answer's usage comes after its status line was sent). A streamed
answer that ends in an error keeps its 200 and says `error=KIND`.

Never the body: no prompt, no answer, no key. /health and /metrics (polled by monitors) are
logged at DEBUG.
"""

from __future__ import annotations

import contextvars
import logging
import time
import uuid
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backends.base import Stats

log = logging.getLogger(__name__)
QUIET_PATHS = ("/health", "/metrics")


@dataclass
class RequestLog:
    id: str
    method: str
    path: str
    started: float = field(default_factory=time.monotonic)
    model: str | None = None
    status: int | None = None
    finish: str | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def line(self) -> str:
        parts = [f"request {self.id} {self.method} {self.path}"]
        if self.model is not None:
            parts.append(f"model={self.model}")
        parts.append(f"status={self.status if self.status is not None else '-'}")
        if self.finish is not None:
            parts.append(f"finish={self.finish}")
        if self.error is not None:
            parts.append(f"error={self.error}")
        if self.prompt_tokens is not None:
            parts.append(f"prompt_tokens={self.prompt_tokens}")
        if self.completion_tokens is not None:
            parts.append(f"completion_tokens={self.completion_tokens}")
        parts.append(f"seconds={time.monotonic() - self.started:.3f}")
        return " ".join(parts)


_current: contextvars.ContextVar[RequestLog | None] = contextvars.ContextVar(
    "ember_request_log", default=None)


def note_model(model: str) -> None:
    if (entry := _current.get()) is not None:
        entry.model = model


def note_usage(stats: Stats) -> None:
    if (entry := _current.get()) is not None:
        entry.finish = stats.finish_reason
        entry.prompt_tokens, entry.completion_tokens = stats.prompt_tokens, stats.completion_tokens


def note_prompt_tokens(tokens: int) -> None:
    """Embeddings read tokens and write none."""
    if (entry := _current.get()) is not None:
        entry.prompt_tokens, entry.completion_tokens = tokens, 0


def note_error(kind: str) -> None:
    if (entry := _current.get()) is not None:
        entry.error = kind


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        entry = RequestLog(uuid.uuid4().hex[:8], scope["method"], scope["path"])
        token = _current.set(entry)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry.status = message["status"]
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", entry.id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            if entry.status is None:  # Starlette's outer error middleware answers 500
                entry.status = 500
            raise
        finally:
            _current.reset(token)
            level = logging.DEBUG if entry.path in QUIET_PATHS else logging.INFO
            log.log(level, "%s", entry.line())
