"""A client of the package index's Simple Repository API, for the mirror's data packages.

It asks for PEP 691 JSON and reads PEP 503 HTML when that is what the index answers (an older
mirror, a devpi or Artifactory proxy); either way it gets each file's name, URL and SHA-256.
`choose_wheel` picks the wheel to download: the mirror packages publish one py3-none-any
wheel per version; the newest is taken, or the version a registry entry pins
(`name==version`). Yanked files (PEP 592) are only taken when pinned.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin

import httpx
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from app.errors import DownloadError
from app.pull.http_file import redacted

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
# PEP 691's recommended negotiation: JSON first, then the HTML forms
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    yanked: bool = False
    size: int | None = None  # PEP 700 (JSON API 1.1); None from HTML


@dataclass(frozen=True)
class Wheel:
    package: str
    version: Version
    file: IndexFile


def split_pin(requirement: str) -> tuple[str, str | None]:
    """'name' or 'name==version' as (name, version or None)."""
    name, sep, version = requirement.partition("==")
    return name.strip(), (version.strip() or None) if sep else None


class _Links(HTMLParser):
    """The <a> elements of a PEP 503 project page, with its <base href> if any."""

    def __init__(self) -> None:
        super().__init__()
        self.base: str | None = None
        self.links: list[tuple[str, str, dict[str, str | None]]] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "base" and self.base is None:
            self.base = dict(attrs).get("href")
        elif tag == "a":
            self._open, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            href = self._open.get("href")
            if href:
                self.links.append((href, "".join(self._text).strip(), self._open))
            self._open = None


def parse_html(text: str, page_url: str) -> list[IndexFile]:
    parser = _Links()
    parser.feed(text)
    base = urljoin(page_url, parser.base) if parser.base else page_url
    files = []
    for href, label, attrs in parser.links:
        url, fragment = urldefrag(urljoin(base, href))
        name = label or url.rsplit("/", 1)[-1]
        digest = fragment[len("sha256="):] if fragment.startswith("sha256=") else None
        files.append(IndexFile(name, url, digest, yanked="data-yanked" in attrs))
    return files


def parse_json(data: dict, page_url: str) -> list[IndexFile]:
    files = []
    for f in data.get("files", []):
        yanked = f.get("yanked", False)
        files.append(IndexFile(f["filename"], urljoin(page_url, f["url"]),
                               (f.get("hashes") or {}).get("sha256"),
                               yanked=bool(yanked), size=f.get("size")))
    return files


def project_files(client: httpx.Client, index: str, package: str) -> list[IndexFile]:
    """Every file the index lists for `package`; a clear DownloadError when it has none."""
    page = urljoin(index, canonicalize_name(package) + "/")
    shown = redacted(index)
    try:
        response = client.get(page, headers={"Accept": ACCEPT})
    except httpx.HTTPError as e:
        raise DownloadError(f"the package index {shown} is unreachable "
                            f"({type(e).__name__}: {e})") from e
    if response.status_code == 404:
        raise DownloadError(f"the package index {shown} has no package {package} (HTTP 404)")
    if response.status_code != 200:
        raise DownloadError(f"the package index {shown} answered HTTP {response.status_code} "
                            f"for {package}")
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    final = str(response.url)
    try:
        if kind == JSON_TYPE or kind == "application/json":
            return parse_json(response.json(), final)
        return parse_html(response.text, final)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise DownloadError(f"the package index {shown} sent a project page for {package} that "
                            f"is not the Simple API ({type(e).__name__}: {e})") from e


def choose_wheel(package: str, files: list[IndexFile], pinned: str | None = None) -> Wheel:
    """The wheel to fetch: a pure-Python one (py3-none-any) of the newest version, or of
    `pinned`."""
    name = canonicalize_name(package)
    wheels = []
    for f in files:
        if not f.filename.endswith(".whl"):
            continue
        try:
            dist, version, _, tags = parse_wheel_filename(f.filename)
        except InvalidWheelFilename:
            continue
        if dist != name or not any(t.abi == "none" and t.platform == "any" for t in tags):
            continue
        wheels.append(Wheel(package, version, f))
    if pinned is not None:
        want = Version(pinned)
        found = [w for w in wheels if w.version == want]
        if not found:
            have = ", ".join(str(v) for v in sorted({w.version for w in wheels})) or "none"
            raise DownloadError(f"{package} has no wheel of version {pinned} on the index "
                                f"(versions with a wheel: {have})")
        return found[0]
    usable = [w for w in wheels if not w.file.yanked]
    if not usable:
        what = "only yanked wheels" if wheels else "no wheel that any platform can use"
        listed = ", ".join(f.filename for f in files[:5]) or "no files"
        raise DownloadError(f"{package} has {what} on the index ({listed})")
    return max(usable, key=lambda w: w.version)


_HEX64 = re.compile(r"[0-9a-f]{64}")


def checked_sha256(wheel: Wheel) -> str:
    """The wheel's SHA-256 from the index; a download without one is refused."""
    digest = (wheel.file.sha256 or "").lower()
    if not _HEX64.fullmatch(digest):
        raise DownloadError(f"the index gives no SHA-256 for {wheel.file.filename}; it cannot be "
                            "checked, so it is not downloaded")
    return digest
