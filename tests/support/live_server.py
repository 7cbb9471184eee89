"""Ember's HTTP API served on a free loopback port from a thread of the test process."""

from __future__ import annotations

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
    port = port or free_port()
    app = create_app(runtime, ServerSettings(port=port, **kw))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", runtime
    finally:
        server.should_exit = True
        thread.join(30)
