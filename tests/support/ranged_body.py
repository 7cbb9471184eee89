"""What the local download servers (hub_server, package_index) share: where a Range request
starts, and writing a file's bytes as a real server would, or misbehaving on purpose (the
connection dropped once after some bytes, a throttled body to cancel or watch)."""

from __future__ import annotations

import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import Protocol


class Behaviour(Protocol):
    drop_after: int | None  # the first GET past this byte of the file closes the connection there
    bytes_per_s: int | None  # throttle the body


def range_start(handler: BaseHTTPRequestHandler) -> int:
    """The first byte a `Range: bytes=N-` request asks for (0 without one)."""
    rng = handler.headers.get("Range")
    if rng and rng.startswith("bytes="):
        return int(rng[6:].split("-")[0])
    return 0


def send_body(handler: BaseHTTPRequestHandler, part: bytes, start: int,
              f: Behaviour) -> None:
    """Write `part` (the file from byte `start`) after the headers, as `f` says to."""
    # the drop happens at byte drop_after of the file: a response ending before it (a ranged
    # read of a header) is sent whole and leaves the drop to a later one
    if f.drop_after is not None and start < f.drop_after < start + len(part):
        handler.wfile.write(part[: f.drop_after - start])
        handler.wfile.flush()
        f.drop_after = None  # only the first time
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)
        return
    step = f.bytes_per_s // 20 if f.bytes_per_s else len(part)
    for i in range(0, len(part), max(1, step)):
        try:
            handler.wfile.write(part[i:i + max(1, step)])
        except (BrokenPipeError, ConnectionResetError):  # the client went away (cancel)
            return
        if f.bytes_per_s:
            time.sleep(0.05)
