"""The update check: is a newer Ember out? Off unless the user switches it on ([app]
update_check in config.toml, or the checkbox in Settings).

What is sent, exactly, when it is on: one GET of the feed URL ([app] update_feed, GitHub's
latest-release API by default), as it is written (no query added), with these headers and
no others:

    Host: <the feed's host>
    Accept: application/json
    Accept-Encoding: gzip
    Connection: keep-alive
    User-Agent: Ember/<version>

No cookies, no credentials. The proxy variables (HTTPS_PROXY, NO_PROXY, ...) are honoured, as
httpx does; the answer is read up to 1 MiB.

The feed is JSON, either Ember's own form

    {"version": "0.2.0", "url": "https://.../releases/0.2.0", "notes": "what changed"}

or a GitHub release (`GET /repos/OWNER/NAME/releases/latest`: tag_name, html_url, body), so a
release published on GitHub is found without other hosting. Versions compare as PEP 440
versions (packaging.version), a leading "v" of a tag dropped: 0.10.0 > 0.9.1, 1.0.0 > 1.0.0rc1.

A feed that is down, slow, or answers anything else costs one log line and nothing more.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import httpx
from packaging.version import InvalidVersion, Version

from app import __version__

log = logging.getLogger(__name__)
TIMEOUT_S = 10.0
MAX_BYTES = 1 << 20


class FeedError(Exception):
    """The feed could not be read or said nothing usable."""


@dataclass(frozen=True)
class Release:
    version: str
    url: str
    notes: str = ""


def request_headers(version: str = __version__) -> dict[str, str]:
    return {"Accept": "application/json", "Accept-Encoding": "gzip",
            "User-Agent": f"Ember/{version}"}


def parse_feed(data: bytes) -> Release:
    """A Release from Ember's feed form or a GitHub release; anything else is a FeedError."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise FeedError(f"not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise FeedError(f"expected a JSON object, got {type(doc).__name__}")
    if "version" in doc:
        version, url, notes = doc["version"], doc.get("url", ""), doc.get("notes", "")
    elif "tag_name" in doc:
        version, url, notes = doc["tag_name"], doc.get("html_url", ""), doc.get("body") or ""
        if isinstance(version, str) and version[:1] in "vV":
            version = version[1:]
    else:
        raise FeedError("no 'version' (or GitHub 'tag_name') in the feed")
    if not all(isinstance(v, str) for v in (version, url, notes)):
        raise FeedError("version, url and notes must be strings")
    try:
        Version(version)
    except InvalidVersion as e:
        raise FeedError(f"{version!r} is not a version") from e
    if not url.startswith(("https://", "http://")):
        raise FeedError(f"the release's address {url[:80]!r} is not an http(s) URL")
    return Release(version, url, notes)


def is_newer(candidate: str, current: str = __version__) -> bool:
    return Version(candidate) > Version(current)


def fetch_latest(url: str, timeout: float = TIMEOUT_S, version: str = __version__) -> Release:
    """GET the feed (only what the module's docstring lists) and parse it."""
    try:
        # httpx adds its own Accept, Accept-Encoding and User-Agent unless given: ours
        # replace them, so the request holds exactly the documented headers
        with httpx.Client(timeout=timeout, follow_redirects=True) as client, \
                client.stream("GET", url, headers=request_headers(version)) as response:
            if response.status_code != 200:
                raise FeedError(f"HTTP {response.status_code}")
            data = b""
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > MAX_BYTES:
                    raise FeedError(f"the answer is over {MAX_BYTES} bytes")
    except httpx.TimeoutException as e:
        raise FeedError(f"no answer within {timeout:g} s") from e
    except httpx.HTTPError as e:
        raise FeedError(f"{type(e).__name__}: {e}") from e
    return parse_feed(data)


def newer_release(url: str, timeout: float = TIMEOUT_S,
                  version: str = __version__) -> Release | None:
    """The feed's release when it is newer than `version`; None when it is not, or when the
    feed could not be read (then one log line says why)."""
    try:
        release = fetch_latest(url, timeout, version)
    except FeedError as e:
        log.warning("update check: %s: %s", url, e)
        return None
    if not is_newer(release.version, version):
        log.info("update check: Ember %s is current (the feed has %s)", version,
                 release.version)
        return None
    log.info("update check: Ember %s is available", release.version)
    return release
