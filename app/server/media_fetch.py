"""Images named by an http(s) URL, fetched for `ember serve --allow-media-urls`: a request
that names a URL makes this machine fetch it, which is a way into the user's network (a
router's admin page, a cloud's metadata service at 169.254.169.254), so fetching is off by
default and, when on, bounded: http and https only, every hop's host resolved and refused
when it is loopback, private, link-local or otherwise not global (unless
`--allow-private-media-urls`), the address really connected to checked again (a name that
resolves twice differently), at most MAX_REDIRECTS redirects (each one checked the same way),
FETCH_TIMEOUT_S in all, and at most backends.media.MAX_IMAGE_BYTES read (streamed: a larger
answer is cut off at the cap, never held whole). No proxy from the environment is used: it
would connect for us, past the address check.

Synchronous (httpx.Client): the dialects' inbound conversion runs in a worker thread, off the
event loop (app.server.media_inbound.off_loop)."""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from urllib.parse import urljoin

import httpx

from backends.media import MAX_IMAGE_BYTES, MediaError

FETCH_TIMEOUT_S = 10.0
MAX_REDIRECTS = 3
CHUNK = 64 * 1024
log = logging.getLogger(__name__)


def _megabytes(n: int) -> str:
    mib = 1024 * 1024
    return f"{n // mib} MB" if n % mib == 0 else f"{n} bytes"


def address_allowed(address: str) -> bool:
    """Whether fetching from `address` (an IP, as text) cannot reach the user's own
    machine or network: only global unicast addresses are (IPv4 in IPv6 judged as IPv4)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _check_host(url: httpx.URL, where: str, allow_private: bool) -> None:
    if url.scheme not in ("http", "https"):
        raise MediaError(f"{where}: only http and https image URLs are fetched, not "
                         f"{url.scheme or 'a relative URL'}:", where)
    host = url.host
    if not host:
        raise MediaError(f"{where}: the image URL has no host", where)
    if allow_private:
        return
    try:
        infos = socket.getaddrinfo(host, url.port or (443 if url.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise MediaError(f"{where}: cannot resolve the image URL's host {host[:100]!r} ({e})",
                         where) from e
    for info in infos:
        address = str(info[4][0])
        if not address_allowed(address):
            raise MediaError(_private_refusal(where, host, address), where)


def _private_refusal(where: str, host: str, address: str) -> str:
    return (f"{where}: the image URL's host {host[:100]} is {address}, an address of this "
            "machine or its network, which Ember does not fetch from (a request could reach "
            "your router or other services this way); start `ember serve "
            "--allow-private-media-urls` to allow it")


def _peer(response: httpx.Response) -> str | None:
    """The address the answer really came from (httpcore's network stream says)."""
    stream = response.extensions.get("network_stream")
    if stream is None:
        return None
    addr = stream.get_extra_info("server_addr")
    return str(addr[0]) if addr else None


def fetch_image(url: str, where: str, *, allow_private: bool = False,
                timeout_s: float = FETCH_TIMEOUT_S, max_bytes: int = MAX_IMAGE_BYTES) -> bytes:
    """The bytes at `url`, within the limits above; a MediaError (a 400) says which one a
    fetch broke, or what the server answered."""
    deadline = time.monotonic() + timeout_s
    current = url
    with httpx.Client(follow_redirects=False, trust_env=False,
                      timeout=httpx.Timeout(timeout_s)) as client:
        for _ in range(MAX_REDIRECTS + 1):
            try:
                parsed = httpx.URL(current)
            except (httpx.InvalidURL, ValueError) as e:
                raise MediaError(f"{where}: not a valid URL ({e})", where) from e
            _check_host(parsed, where, allow_private)
            log.info("fetching an image from %s", parsed.host)  # the host only: not the path
            try:
                with client.stream("GET", parsed, headers={"Accept": "image/*"}) as response:
                    peer = _peer(response)
                    if not allow_private and peer is not None and not address_allowed(peer):
                        raise MediaError(_private_refusal(where, parsed.host, peer), where)
                    if response.is_redirect:
                        location = response.headers.get("location", "")
                        if not location:
                            raise MediaError(f"{where}: {parsed.host} answered a redirect "
                                             "without a Location", where)
                        current = urljoin(str(parsed), location)
                        continue
                    if response.status_code != 200:
                        raise MediaError(f"{where}: fetching the image failed: "
                                         f"{parsed.host} answered HTTP "
                                         f"{response.status_code}", where)
                    return _read_capped(response, where, deadline, timeout_s, max_bytes)
            except httpx.TimeoutException as e:
                raise MediaError(f"{where}: fetching the image took longer than "
                                 f"{timeout_s:g} s", where) from e
            except httpx.HTTPError as e:
                raise MediaError(f"{where}: fetching the image failed ({type(e).__name__}: "
                                 f"{str(e)[:160]})", where) from e
    raise MediaError(f"{where}: the image URL redirects more than {MAX_REDIRECTS} times",
                     where)


def _read_capped(response: httpx.Response, where: str, deadline: float, timeout_s: float,
                 max_bytes: int) -> bytes:
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise MediaError(f"{where}: the image is {int(length) / 1e6:.1f} MB; the limit is "
                         f"{_megabytes(max_bytes)}", where)
    body = bytearray()
    for chunk in response.iter_bytes(CHUNK):
        body += chunk
        if len(body) > max_bytes:
            raise MediaError(f"{where}: the image is over the limit of "
                             f"{_megabytes(max_bytes)}", where)
        if time.monotonic() > deadline:
            raise MediaError(f"{where}: fetching the image took longer than "
                             f"{timeout_s:g} s", where)
    return bytes(body)
