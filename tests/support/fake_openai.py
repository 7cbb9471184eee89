"""A small OpenAI-compatible server that misbehaves on purpose, for the remote backend's tests.

The model a request names picks the misbehaviour:
  ok       streams "Hello world" properly (without usage: the client counts chunks)
  slow     waits `slow_s` before answering at all
  stall    sends one chunk, then nothing for `slow_s`
  drop     sends three chunks, then closes the connection in the middle of the chunked body
  garbage  sends an SSE line that is not JSON
  html     answers 200 with an HTML page (a captive portal, a wrong URL)
  fail     answers 500 with an OpenAI error body
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODELS = ("ok", "slow", "stall", "drop", "garbage", "html", "fail")


def _chunk(text: str, finish: str | None = None) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    slow_s = 3.0
    models_garbage = False

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunked(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:  # http.server's naming
        if self.path != "/v1/models":
            return self._send(404, b'{"error": "no such path"}')
        if self.models_garbage:
            return self._send(200, b"<html>hello</html>", "text/html")
        data = [{"id": m, "object": "model", "created": 1, "owned_by": "fake"} for m in MODELS]
        self._send(200, json.dumps({"object": "list", "data": data}).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        model = json.loads(self.rfile.read(length)).get("model")
        if model == "slow":
            time.sleep(self.slow_s)
        if model == "fail":
            return self._send(500, json.dumps({"error": {
                "message": "CUDA out of memory", "type": "server_error"}}).encode())
        if model == "html":
            return self._send(200, b"<html><body>Please log in</body></html>", "text/html")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if model == "garbage":
            self._chunked(_chunk("Hel"))
            self._chunked(b"data: {this is not json\n\n")
        elif model == "drop":
            for piece in ("The ", "answer ", "is "):
                self._chunked(_chunk(piece))
            # half a chunk, then the socket goes away: no terminating zero-length chunk
            self.wfile.write(b"40\r\ndata: {\"cho")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        elif model == "stall":
            self._chunked(_chunk("Hel"))
            time.sleep(self.slow_s)
        else:
            for piece in ("Hello", " world"):
                self._chunked(_chunk(piece))
            self._chunked(_chunk("", "stop"))
            self._chunked(b"data: [DONE]\n\n")
        self._chunked(b"")


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that hang up (timeouts, cancels) are what the tests do on purpose


@contextmanager
def fake_server(slow_s: float = 3.0, models_garbage: bool = False) -> Iterator[str]:
    """A running fake on a free loopback port; yields its base URL (with /v1)."""
    handler = type("FakeHandler", (Handler,), {"slow_s": slow_s,
                                              "models_garbage": models_garbage})
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
