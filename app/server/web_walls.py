"""Who may talk to the server from a browser: the Host, Origin and Content-Type checks every
route runs before anything else (Ollama's model: `allowedHostsMiddleware` and OLLAMA_ORIGINS).

A web page the user visits can make their browser send requests to 127.0.0.1. Three walls:
- **Host**: DNS rebinding points an attacker's name at 127.0.0.1, so the browser sends
  `Host: attacker.example`. A server bound to loopback answers only loopback names and
  addresses (and the address it was told to bind); one bound beyond loopback is reached by
  other machines under names it cannot know, and is guarded by its API key instead.
- **Origin**: a browser names the page that made a request. Loopback pages and the origins the
  user listed (`--cors-origin`, EMBER_ORIGINS) may call; any other page gets 403, even where
  CORS would only have hidden the answer (a POST still runs without CORS).
- **Content-Type**: a page may POST `text/plain` or a form without asking first (a "simple
  request"); a JSON body must say so (curl: `-H 'Content-Type: application/json'`; its bare
  `-d` sends a form type, which FastAPI never read as JSON either).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

ORIGINS_ENV = "EMBER_ORIGINS"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_LOOPBACK_ORIGIN = r"https?://(?:localhost|[a-z0-9.-]+\.localhost|127\.\d+\.\d+\.\d+|\[::1\])(?::\d+)?"


def origins_from_env(listed: Iterable[str] = ()) -> tuple[str, ...]:
    """The origins given on the command line and in EMBER_ORIGINS (comma-separated)."""
    env = [o.strip() for o in os.environ.get(ORIGINS_ENV, "").split(",")]
    return tuple(dict.fromkeys(o.rstrip("/") for o in [*listed, *env] if o.strip()))


def _is_loopback_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_name(host: str) -> bool:
    host = host.lower().rstrip(".")
    return host == "localhost" or host.endswith(".localhost") or _is_loopback_address(host)


def host_name(header: str) -> str:
    """The name in a Host header, without its port (`[::1]:11435` -> `::1`)."""
    header = header.strip()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    if header.count(":") > 1:  # a bare IPv6 address, which a Host should bracket
        return header
    return header.rsplit(":", 1)[0] if ":" in header else header


def origin_pattern(listed: Iterable[str]) -> re.Pattern[str]:
    """The origins a browser may call from: loopback pages on any port, and the listed ones
    (`*` matches any run of characters: `chrome-extension://*`, `https://*.example.com`)."""
    parts = [_LOOPBACK_ORIGIN]
    for origin in listed:
        if origin == "*":
            parts.append(".*")
        else:
            parts.append(".*".join(re.escape(piece) for piece in origin.rstrip("/").split("*")))
    return re.compile("(?i)" + "|".join(f"(?:{p})" for p in parts))


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    code: str


@dataclass(frozen=True)
class WebWalls:
    bind_host: str
    origins: re.Pattern[str]

    @classmethod
    def for_server(cls, bind_host: str, cors_origins: Iterable[str]) -> WebWalls:
        return cls(bind_host=bind_host, origins=origin_pattern(cors_origins))

    @property
    def loopback_only(self) -> bool:
        return is_loopback_name(self.bind_host)

    def check(self, method: str, headers: dict[str, str],
              client_host: str | None) -> Refusal | None:
        """Why this request is refused, or None. `headers`: lower-case names."""
        refusal = self._check_host(headers.get("host"), client_host)
        if refusal is None:
            refusal = self._check_origin(headers.get("origin"))
        if refusal is None:
            refusal = self._check_content_type(method, headers)
        return refusal

    def _check_host(self, host: str | None, client_host: str | None) -> Refusal | None:
        if not self.loopback_only:
            return None  # reached under names we cannot know: the API key guards it
        if host is None or not host.strip():
            if client_host is not None and is_loopback_name(client_host):
                return None
            return Refusal(403, "request without a Host header", "forbidden_host")
        name = host_name(host)
        if is_loopback_name(name) or name.lower() == self.bind_host.lower():
            return None
        return Refusal(403, f"Host {host[:100]!r} is not this server's: a server on "
                       f"{self.bind_host} answers only loopback names (a web page may have "
                       "pointed its own name here)", "forbidden_host")

    def _check_origin(self, origin: str | None) -> Refusal | None:
        if origin is None or self.origins.fullmatch(origin.rstrip("/")):
            return None
        return Refusal(403, f"Origin {origin[:100]!r} may not call this server: allow it "
                       "with --cors-origin or EMBER_ORIGINS", "forbidden_origin")

    def _check_content_type(self, method: str, headers: dict[str, str]) -> Refusal | None:
        if method not in BODY_METHODS:
            return None
        length = headers.get("content-length", "")
        if (not length or length == "0") and "transfer-encoding" not in headers:
            return None  # no body: the route says what it misses
        given = headers.get("content-type", "")
        media = given.split(";", 1)[0].strip().lower()
        if media == "application/json" or media.endswith("+json"):
            return None
        return Refusal(415, f"the body must be JSON, sent as 'Content-Type: application/json' "
                       f"(got {given[:100]!r})" if given else
                       "the body must be JSON, sent with 'Content-Type: application/json' "
                       "(the request has no Content-Type)", "unsupported_media_type")
