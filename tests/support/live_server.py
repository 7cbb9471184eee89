"""Ember's HTTP API served on a free loopback port from a thread of the test process."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from app.hardware import HardwareProfile
from app.runtime import Runtime
from app.server.app import ServerSettings, create_app
from app.store import Store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_server(store: Store, hardware: HardwareProfile | None = None,
                port: int | None = None, **kw: object) -> Iterator[tuple[str, Runtime]]:
    """`hardware`: the machine the fit model plans for (a simulated one: app.hardware's);
    `port`: the one to listen on (a free one if None; the same again restarts "a service")."""
    runtime = Runtime(store=store, hardware=hardware)
    with serve_app(runtime, ServerSettings(**kw), port) as url:  # type: ignore[arg-type]
        yield url, runtime


@contextmanager
def serve_app(runtime: Runtime, settings: ServerSettings,
              port: int | None = None) -> Iterator[str]:
    """`runtime` served with `settings` on loopback, on `port` or a free one (the
    settings' own is replaced); yields its URL."""
    port = port or free_port()
    app = create_app(runtime, dataclasses.replace(settings, host="127.0.0.1", port=port))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
