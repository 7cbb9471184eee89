"""A local HTTP server that speaks the part of the Hugging Face hub protocol that
`hf_hub_download` and `list_repo_tree` use: HEAD and GET (with Range) on
/{repo}/resolve/{revision}/{file}, and GET /api/models/{repo}/tree/{revision}.
Each file can misbehave on purpose: drop the connection halfway, serve corrupted bytes,
be missing (404) or gated (401).

As on the real hub, weights are LFS files (ETag and listing give their SHA-256) and small
text files live in git (ETag and listing give their git blob id)."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.support.ranged_body import range_start, send_body

COMMIT = "a" * 40
TINY_REPO, TINY_FILE = "someone/tiny-GGUF", "tiny-q8_0.gguf"  # write_registry's model
LFS_ABOVE = 10 << 20
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


@dataclass
class HubFile:
    data: bytes
    gated: bool = False
    corrupt: bool = False  # serve other bytes than the ETag (sha256) promises
    drop_after: int | None = None  # close the first GET after this many bytes
    bytes_per_s: int | None = None  # throttle the body (a slow link, to watch progress)
    name: str = ""

    @property
    def lfs(self) -> bool:
        return len(self.data) > LFS_ABOVE or self.name.endswith(LFS_SUFFIXES)

    @cached_property
    def etag(self) -> str:
        if self.lfs:
            return hashlib.sha256(self.data).hexdigest()
        return git_blob_sha1(self.data)

    def body(self) -> bytes:
        if not self.corrupt:
            return self.data
        i = len(self.data) // 2  # one flipped byte: fast on a model-sized file
        return self.data[:i] + bytes([self.data[i] ^ 0xFF]) + self.data[i + 1:]


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


@dataclass
class FakeHub:
    files: dict[tuple[str, str], HubFile] = field(default_factory=dict)
    requests: list[dict[str, str | None]] = field(default_factory=list)
    url: str = ""

    def add(self, repo: str, filename: str, data: bytes, **kw: object) -> HubFile:
        f = HubFile(data, name=filename, **kw)  # type: ignore[arg-type]
        self.files[(repo, filename)] = f
        return f


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _lookup(self) -> HubFile | None:
            parts = self.path.split("?")[0].strip("/").split("/")
            if "resolve" not in parts:
                return None
            i = parts.index("resolve")
            repo, filename = "/".join(parts[:i]), "/".join(parts[i + 2:])
            return hub.files.get((repo, filename))

        def _error(self, code: int, error_code: str, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(code)
            self.send_header("X-Error-Code", error_code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _tree(self) -> None:
            parts = self.path.split("?")[0].strip("/").split("/")
            repo = "/".join(parts[2:parts.index("tree")])
            files = [(name, f) for (r, name), f in sorted(hub.files.items()) if r == repo]
            if not files:
                return self._error(404, "RepoNotFound", "Repository not found")
            if any(f.gated for _, f in files):
                return self._error(401, "GatedRepo", "Access to this model is restricted")
            listing = []
            for name, f in files:
                entry = {"type": "file", "path": name, "size": len(f.data),
                         "oid": git_blob_sha1(f.data)}
                if f.lfs:
                    entry["lfs"] = {"oid": f.etag,
                                    "size": len(f.data), "pointerSize": 134}
                listing.append(entry)
            body = json.dumps(listing).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None

        def _serve(self, head: bool) -> None:
            hub.requests.append({"method": self.command, "path": self.path,
                                 "range": self.headers.get("Range"),
                                 "auth": self.headers.get("Authorization")})
            if self.path.startswith("/api/models/") and "/tree/" in self.path:
                return self._tree()
            f = self._lookup()
            if f is None:
                return self._error(404, "EntryNotFound", "Entry not found")
            if f.gated:
                return self._error(401, "GatedRepo", "Access to this model is restricted")
            body = f.body()
            start = range_start(self)
            part = body[start:]
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{f.etag}"')
            self.send_header("Content-Length", str(len(part)))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if head:
                return None
            return send_body(self, part, start, f)

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

    return Handler


def start_hub() -> tuple[FakeHub, ThreadingHTTPServer]:
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    # a short poll: shutdown() waits for it (0.5 s by default, at every test's teardown)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return hub, server


def write_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes,
                   sources: list[dict]) -> None:
    """A registry (EMBER_REGISTRY) of one model, tiny-hub:Q8_0: TINY_FILE holding `data`,
    downloadable from `sources`."""
    registry = {"models": [{
        "id": "tiny-hub", "family": "test", "name": "Tiny", "description": "test model",
        "license": "mit", "params": 64, "context": {"default": 256, "max": 256}, "chat": False,
        "arch": {"type": "llama", "layers": 1, "hidden": 8, "heads": 2, "kv_heads": 2,
                 "head_dim": 4, "vocab": 8, "ffn": 8},
        "variants": [{"format": "gguf", "quant": "Q8_0", "file": TINY_FILE, "size_bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest(), "sources": sources}]}]}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(registry))
    monkeypatch.setenv("EMBER_REGISTRY", str(tmp_path / "models.yaml"))
