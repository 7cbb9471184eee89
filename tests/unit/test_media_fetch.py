"""Image URLs fetched for `ember serve --allow-media-urls` (app.server.media_fetch), against a
real HTTP server on loopback: an allowed fetch, the refusals (loopback without
--allow-private-media-urls, a redirect to file:, too many redirects, an HTTP error), the
size cap (declared, and streamed past it without a length: the read stops at the cap), and
the time limit; then the same through the app, on the OpenAI and Anthropic wires."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.server.media_fetch import address_allowed, fetch_image
from backends.media import MediaError
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served
from tests.support.images import BROKEN, RED

STREAMED: dict[str, int] = {"sent": 0}  # bytes /endless wrote before the client hung up


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        if "Content_Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path
        if path == "/red.png":
            self._send(200, RED, Content_Type="image/png")
        elif path == "/broken.png":
            self._send(200, BROKEN, Content_Type="image/png")
        elif path == "/hop":
            self._send(302, Location="/red.png")
        elif path == "/to-file":
            self._send(302, Location="file:///etc/passwd")
        elif path.startswith("/loop"):
            self._send(302, Location=f"/loop{len(path)}")
        elif path == "/missing":
            self._send(404, b"no")
        elif path == "/declared-huge":
            self.send_response(200)
            self.send_header("Content-Length", str(30 * 1024 * 1024))
            self.end_headers()
        elif path == "/endless":  # no length, chunks until the client stops reading
            self.send_response(200)
            self.end_headers()
            chunk = b"\0" * 65536
            try:
                while STREAMED["sent"] < 200 * 1024 * 1024:
                    self.wfile.write(chunk)
                    STREAMED["sent"] += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif path == "/slow":
            time.sleep(3)
            self._send(200, RED)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_allowed_fetch_follows_a_redirect_and_returns_the_bytes(site):
    assert fetch_image(f"{site}/hop", "image_url", allow_private=True) == RED


def test_loopback_is_refused_unless_private_addresses_are_allowed(site):
    with pytest.raises(MediaError) as e:
        fetch_image(f"{site}/red.png", "messages[0].content[0].image_url.url")
    assert str(e.value).startswith(
        "messages[0].content[0].image_url.url: the image URL's host 127.0.0.1 is 127.0.0.1, "
        "an address of this machine or its network, which Ember does not fetch from")
    assert "--allow-private-media-urls" in str(e.value)
    with pytest.raises(MediaError, match="localhost is (127.0.0.1|::1)"):
        fetch_image(site.replace("127.0.0.1", "localhost") + "/red.png", "x")


@pytest.mark.parametrize(("path", "words"), [
    ("/to-file", "only http and https image URLs are fetched, not file:"),
    ("/loop", "the image URL redirects more than 3 times"),
    ("/missing", "fetching the image failed: 127.0.0.1 answered HTTP 404"),
    ("/declared-huge", "the image is 31.5 MB; the limit is 20 MB"),
])
def test_fetch_refusals_say_why(site, path, words):
    with pytest.raises(MediaError) as e:
        fetch_image(site + path, "image_url", allow_private=True)
    assert words in str(e.value), e.value


def test_a_body_past_the_cap_stops_being_read_at_the_cap(site):
    STREAMED["sent"] = 0
    cap = 1024 * 1024
    with pytest.raises(MediaError, match="the image is over the limit of 1 MB"):
        fetch_image(f"{site}/endless", "image_url", allow_private=True, max_bytes=cap)
    time.sleep(0.2)  # the server notices the closed connection
    assert STREAMED["sent"] < 50 * cap  # socket buffers, not the 200 MB the server offers


def test_a_slow_server_hits_the_time_limit(site):
    started = time.monotonic()
    with pytest.raises(MediaError, match="fetching the image took longer than 0.5 s"):
        fetch_image(f"{site}/slow", "image_url", allow_private=True, timeout_s=0.5)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(("address", "allowed"), [
    ("127.0.0.1", False), ("10.1.2.3", False), ("192.168.0.1", False), ("172.16.5.4", False),
    ("169.254.169.254", False), ("100.64.0.1", False), ("0.0.0.0", False), ("::1", False),
    ("::ffff:127.0.0.1", False), ("fe80::1%eth0", False), ("fd00::1", False),
    ("224.0.0.1", False), ("not-an-ip", False),
    ("8.8.8.8", True), ("2606:4700:4700::1111", True), ("::ffff:8.8.8.8", True),
])
def test_only_global_unicast_addresses_are_fetched_from(address, allowed):
    assert address_allowed(address) is allowed


# ---------------------------------------------------------------------------- through the app
def chat(url: str) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url}}]}]}


def test_the_server_fetches_an_image_url_only_when_started_to(site):
    for settings, status, words in [
            ({}, 400, "does not fetch image URLs"),
            ({"media_urls": True}, 400, "which Ember does not fetch from"),
            ({"media_urls": True, "media_urls_private": True}, 200, "")]:
        fake = ScriptedRuntime(sees=True)
        with served(fake, **settings) as client:
            r = client.post("/v1/chat/completions", json=chat(f"{site}/red.png"))
            assert r.status_code == status, r.text
            if status == 400:
                assert words in r.json()["error"]["message"]
                assert r.json()["error"]["param"] == "messages[0].content[1].image_url.url"
                assert not fake.requests
            else:
                (image,) = fake.requests[-1].messages[0].media  # type: ignore[index]
                assert (image.width, image.height, image.source_format) == (8, 8, "PNG")


def test_a_fetched_broken_image_is_a_400_in_anthropics_shape(site):
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": f"{site}/broken.png"}}]}]}
    with served(ScriptedRuntime(sees=True), media_urls=True, media_urls_private=True) as client:
        r = client.post("/v1/messages", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith(
        "messages[0].content[0].source.url is broken")
