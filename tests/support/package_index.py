"""A local package index speaking the Simple Repository API as PyPI does: a project page at
/simple/<name>/ in PEP 691 JSON or PEP 503 HTML (chosen from the Accept header, as PyPI
chooses; `json=False` makes it an HTML-only index), and the files at /files/<filename> with
Range support. The mirror's client runs against it exactly as against pypi.org.

A file can misbehave on purpose: drop the connection after some bytes (once), be listed with
a SHA-256 its bytes do not have, or be listed but missing (404)."""

from __future__ import annotations

import hashlib
import html
import json
import re
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.ranged_body import range_start, send_body

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class IndexedFile:
    filename: str
    data: bytes
    listed_sha256: str = ""  # what the project page says; the data's own by default
    missing: bool = False  # listed, but GET answers 404
    drop_after: int | None = None  # the first GET closes the connection after this many bytes
    bytes_per_s: int | None = None  # throttle the body (to cancel or watch progress)
    yanked: bool = False

    def __post_init__(self) -> None:
        self.listed_sha256 = self.listed_sha256 or hashlib.sha256(self.data).hexdigest()


@dataclass
class PackageIndex:
    projects: dict[str, list[IndexedFile]] = field(default_factory=dict)
    requests: list[dict[str, str | None]] = field(default_factory=list)
    json: bool = True  # False: an index that only speaks PEP 503 HTML
    url: str = ""  # the server's root; the index URL is url + "/simple/"
    ca_file: Path | None = None  # over HTTPS: the certificate to trust

    @property
    def index_url(self) -> str:
        return self.url + "/simple/"

    def add(self, project: str, path: Path | IndexedFile) -> IndexedFile:
        f = path if isinstance(path, IndexedFile) else IndexedFile(path.name, path.read_bytes())
        self.projects.setdefault(normalize(project), []).append(f)
        return f

    def add_folder(self, folder: Path) -> None:
        """Every wheel in `folder`, each under the project its file name gives."""
        for wheel in sorted(folder.glob("*.whl")):
            self.add(wheel.name.split("-")[0], wheel)

    def file(self, filename: str) -> IndexedFile:
        return next(f for files in self.projects.values() for f in files
                    if f.filename == filename)

    def file_gets(self) -> list[dict[str, str | None]]:
        return [r for r in self.requests if r["path"].startswith("/files/")]


def _project_json(index: PackageIndex, name: str, files: list[IndexedFile]) -> bytes:
    return json.dumps({
        "meta": {"api-version": "1.1"}, "name": name,
        "files": [{"filename": f.filename, "url": f"../../files/{f.filename}",
                   "hashes": {"sha256": f.listed_sha256}, "size": len(f.data),
                   "yanked": f.yanked} for f in files]}).encode()


def _project_html(name: str, files: list[IndexedFile]) -> bytes:
    links = "\n".join(
        f'<a href="/files/{html.escape(f.filename)}#sha256={f.listed_sha256}"'
        f'{" data-yanked" if f.yanked else ""}>{html.escape(f.filename)}</a><br/>'
        for f in files)
    return (f"<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" "
            f"content=\"1.0\"><title>Links for {name}</title></head>\n<body>"
            f"<h1>Links for {name}</h1>\n{links}\n</body></html>\n").encode()


def _handler(index: PackageIndex) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: bytes, content_type: str,
                  extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _project(self, name: str) -> None:
            files = index.projects.get(normalize(name))
            if files is None or name != normalize(name):
                return self._send(404, b"Not Found", "text/plain")
            if index.json and JSON_TYPE in (self.headers.get("Accept") or ""):
                return self._send(200, _project_json(index, name, files), JSON_TYPE)
            return self._send(200, _project_html(name, files), "text/html")

        def _file(self, filename: str) -> None:
            try:
                f = index.file(filename)
            except StopIteration:
                f = None
            if f is None or f.missing:
                return self._send(404, b"Not Found", "text/plain")
            start = range_start(self)
            if start and start >= len(f.data):
                return self._send(416, b"", "text/plain",
                                  {"Content-Range": f"bytes */{len(f.data)}"})
            part = f.data[start:]
            self.send_response(206 if start else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(part)))
            self.send_header("Accept-Ranges", "bytes")
            if start:
                self.send_header("Content-Range",
                                 f"bytes {start}-{len(f.data) - 1}/{len(f.data)}")
            self.end_headers()
            return send_body(self, part, start, f)

        def do_GET(self) -> None:
            index.requests.append({"path": self.path, "accept": self.headers.get("Accept"),
                                   "range": self.headers.get("Range")})
            path = self.path.split("?")[0]
            if path.startswith("/simple/") and path.endswith("/"):
                return self._project(path[len("/simple/"):-1])
            if path.startswith("/files/"):
                return self._file(path[len("/files/"):])
            return self._send(404, b"Not Found", "text/plain")

    return Handler


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (openssl), the certificate being its own CA."""
    cert, key = folder / "index-cert.pem", folder / "index-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@contextmanager
def serve_index(index: PackageIndex | None = None,
                tls_in: Path | None = None) -> Iterator[PackageIndex]:
    """`index` served on a free local port until the block ends. `tls_in`: over HTTPS, as
    PyPI is (a client then reads the body in TLS records of at most 16 KB, not the larger
    reads of plain HTTP on loopback), with a self-signed certificate written to that folder
    (`index.ca_file`, for SSL_CERT_FILE)."""
    index = index or PackageIndex()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(index))
    server.daemon_threads = True
    scheme = "http"
    if tls_in is not None:
        cert, key = self_signed_certificate(tls_in)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme, index.ca_file = "https", cert
    index.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
