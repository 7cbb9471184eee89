"""A local HTTP server that speaks the part of the Hugging Face hub protocol that
`hf_hub_download`, `list_repo_tree`, `model_info` and `list_models` use: HEAD and GET (with
Range, `bytes=N-` or `bytes=N-M`) on /{repo}/resolve/{revision}/{file}, GET
/api/models/{repo}/tree/{revision}, GET /api/models/{repo}[/revision/{revision}] (model_info,
`blobs=true` for sizes and LFS hashes) and GET /api/models?search=&filter=&sort=&limit=&expand=
(the search), in the JSON shapes the real Hub answers with. It counts the bytes of each file
it serves (`served`), so a test can prove only a header was read.
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
from urllib.parse import parse_qs, unquote, urlsplit

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
    missing: bool = False  # listed, but its download is a 404 (a listing out of date)

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
class RepoMeta:
    """What the Hub says about a repo beside its files (search results, model_info)."""
    downloads: int = 0
    likes: int = 0
    tags: tuple[str, ...] = ()
    library_name: str | None = None
    license: str | None = None
    gated: str | bool = False  # "auto" | "manual" | False
    last_modified: str = "2025-01-01T00:00:00.000Z"
    created_at: str = "2024-06-01T00:00:00.000Z"
    pipeline_tag: str | None = "text-generation"
    private: bool = False
    trending_score: int = 0


@dataclass
class FakeHub:
    files: dict[tuple[str, str], HubFile] = field(default_factory=dict)
    repos: dict[str, RepoMeta] = field(default_factory=dict)
    requests: list[dict[str, str | None]] = field(default_factory=list)
    served: dict[tuple[str, str], int] = field(default_factory=dict)  # body bytes sent
    url: str = ""

    def add(self, repo: str, filename: str, data: bytes, **kw: object) -> HubFile:
        f = HubFile(data, name=filename, **kw)  # type: ignore[arg-type]
        self.files[(repo, filename)] = f
        return f

    def repo(self, repo: str, **kw: object) -> RepoMeta:
        meta = RepoMeta(**kw)  # type: ignore[arg-type]
        if meta.license and f"license:{meta.license}" not in meta.tags:
            meta.tags += (f"license:{meta.license}",)
        self.repos[repo] = meta
        return meta

    def repo_ids(self) -> list[str]:
        return sorted(set(self.repos) | {r for r, _ in self.files})

    def meta(self, repo: str) -> RepoMeta:
        meta = self.repos.get(repo) or RepoMeta()
        if not meta.gated and any(f.gated for (r, _), f in self.files.items() if r == repo):
            meta = RepoMeta(**{**meta.__dict__, "gated": "manual"})
        return meta

    def served_bytes(self, repo: str | None = None) -> int:
        return sum(n for (r, _), n in self.served.items() if repo is None or r == repo)


SEARCH_FIELDS = ("_id", "id", "modelId", "likes", "downloads", "trendingScore", "private",
                 "tags", "library_name", "pipeline_tag", "createdAt", "lastModified", "gated")


def search_entry(hub: FakeHub, repo: str) -> dict:
    m = hub.meta(repo)
    return {"_id": hashlib.md5(repo.encode()).hexdigest()[:24], "id": repo, "modelId": repo,
            "likes": m.likes, "downloads": m.downloads, "trendingScore": m.trending_score,
            "private": m.private, "tags": list(m.tags), "library_name": m.library_name,
            "pipeline_tag": m.pipeline_tag, "createdAt": m.created_at,
            "lastModified": m.last_modified, "gated": m.gated}


def model_info(hub: FakeHub, repo: str, blobs: bool) -> dict:
    info = search_entry(hub, repo)
    m = hub.meta(repo)
    siblings = []
    for (r, name), f in sorted(hub.files.items()):
        if r != repo:
            continue
        entry: dict = {"rfilename": name}
        if blobs:
            entry |= {"size": len(f.data), "blobId": git_blob_sha1(f.data)}
            if f.lfs:
                entry["lfs"] = {"size": len(f.data), "sha256": f.etag, "pointerSize": 134}
        siblings.append(entry)
    info |= {"author": repo.split("/")[0], "sha": COMMIT, "disabled": False,
             "cardData": {"license": m.license} if m.license else {}, "siblings": siblings,
             "usedStorage": sum(len(f.data) for (r, _), f in hub.files.items() if r == repo)}
    return info


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

        def _json(self, data: object) -> None:
            body = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _search(self) -> None:
            q = parse_qs(urlsplit(self.path).query)
            text = (q.get("search") or [""])[0].lower()
            tags = q.get("filter", [])
            found = [r for r in hub.repo_ids() if text in r.lower()
                     and all(t in hub.meta(r).tags or t == hub.meta(r).library_name
                             for t in tags)]
            key = (q.get("sort") or ["trendingScore"])[0]
            entries = [search_entry(hub, r) for r in found]
            if key in ("downloads", "likes", "trendingScore", "lastModified", "createdAt"):
                entries.sort(key=lambda e: e[key], reverse=True)  # the Hub sorts descending
            entries = entries[:int((q.get("limit") or ["1000"])[0])]
            expand = q.get("expand")
            if expand:  # the Hub then answers with the fields asked for, and the ids
                entries = [{k: v for k, v in e.items() if k in ("_id", "id") or k in expand}
                           for e in entries]
            self._json(entries)

        def _info(self) -> None:
            parts = unquote(urlsplit(self.path).path).strip("/").split("/")[2:]
            if "revision" in parts:
                parts = parts[:parts.index("revision")]
            repo = "/".join(parts)
            if repo not in hub.repo_ids():
                return self._error(404, "RepoNotFound", "Repository not found")
            blobs = parse_qs(urlsplit(self.path).query).get("blobs") == ["True"] or \
                parse_qs(urlsplit(self.path).query).get("blobs") == ["true"]
            return self._json(model_info(hub, repo, blobs))

        def _serve(self, head: bool) -> None:
            hub.requests.append({"method": self.command, "path": self.path,
                                 "range": self.headers.get("Range"),
                                 "auth": self.headers.get("Authorization")})
            if self.path.startswith("/api/models/") and "/tree/" in self.path:
                return self._tree()
            if urlsplit(self.path).path == "/api/models":
                return self._search()
            if self.path.startswith("/api/models/"):
                return self._info()
            f = self._lookup()
            if f is None or f.missing:
                return self._error(404, "EntryNotFound", "Entry not found")
            if f.gated:
                return self._error(401, "GatedRepo", "Access to this model is restricted")
            body = f.body()
            start = range_start(self)
            end = range_end(self, len(body))
            part = body[start:end]
            ranged = bool(start) or end < len(body)
            self.send_response(206 if ranged else 200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{f.etag}"')
            self.send_header("Content-Length", str(len(part)))
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(body)}")
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if head:
                return None
            key = next(k for k, v in hub.files.items() if v is f)
            hub.served[key] = hub.served.get(key, 0) + len(part)
            return send_body(self, part, start, f)

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

    return Handler


def range_end(handler: BaseHTTPRequestHandler, size: int) -> int:
    """One past the last byte a `Range: bytes=N-M` request asks for (`size` without M)."""
    rng = handler.headers.get("Range") or ""
    if rng.startswith("bytes=") and rng.partition("-")[2].strip():
        return min(int(rng.partition("-")[2]) + 1, size)
    return size


def use_hub(monkeypatch: pytest.MonkeyPatch, url: str, cache: Path) -> None:
    """Point huggingface_hub (and Ember's Hub code) at the local Hub server at `url`: plain
    HTTP downloads (no Xet), its own cache folder, and no token of the user's."""
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_TOKEN", raising=False)


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
