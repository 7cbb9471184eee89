"""A local release feed for the update check's tests: answers every GET with what the test
set (body, status, a delay) and records each request's path and headers as received."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOLD_S = 60.0


@dataclass
class Feed:
    body: bytes = b""
    status: int = 200
    delay_s: float = 0.0  # before the answer: a slow feed
    # set: each answer waits until it is set (HOLD_S at most), a feed as slow as the test says
    hold: threading.Event | None = None
    answered: int = 0  # answers sent (after the delay and the hold)
    url: str = ""
    requests: list[dict] = field(default_factory=list)  # {"path", "headers": [(name, value)]}


@contextmanager
def feed_server() -> Iterator[Feed]:
    feed = Feed()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            feed.requests.append({"path": self.path, "headers": list(self.headers.items())})
            time.sleep(feed.delay_s)
            if feed.hold is not None:
                feed.hold.wait(HOLD_S)
            self.send_response(feed.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(feed.body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client gave up
                self.wfile.write(feed.body)
            feed.answered += 1

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    feed.url = f"http://127.0.0.1:{server.server_address[1]}/releases/latest"
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        yield feed
    finally:
        server.shutdown()
        server.server_close()
