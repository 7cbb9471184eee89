"""Searching the Hub for models Ember can run: huggingface_hub's `list_models`, filtered to
GGUF or MLX repositories, sorted by downloads or by last update."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from app.errors import DownloadError
from app.pull import hf_hub

if TYPE_CHECKING:
    from huggingface_hub import ModelInfo

HubSort = Literal["downloads", "last_modified", "likes", "trending_score"]
SORTS: dict[str, HubSort] = {"downloads": "downloads", "recent": "last_modified",
                             "likes": "likes", "trending": "trending_score"}
FORMATS = ("gguf", "mlx")
MAX_LIMIT = 100
# what a search asks for: the Hub's default answer has neither lastModified nor gated
EXPAND: list[Any] = ["downloads", "likes", "lastModified", "gated", "tags", "library_name",
          "pipeline_tag", "private", "createdAt"]


@dataclass(frozen=True)
class HubRepo:
    id: str
    downloads: int
    likes: int
    last_modified: datetime | None
    license: str | None
    gated: bool
    formats: tuple[str, ...]  # which of FORMATS its tags say it has
    pipeline: str | None = None

    def to_json(self) -> dict:
        return {"id": self.id, "downloads": self.downloads, "likes": self.likes,
                "last_modified": self.last_modified.isoformat() if self.last_modified
                else None, "license": self.license, "gated": self.gated,
                "formats": list(self.formats), "pipeline": self.pipeline}


def search(query: str = "", fmt: str | None = None, sort: str = "downloads",
           limit: int = 20) -> list[HubRepo]:
    """Repositories matching `query`; `fmt` ("gguf", "mlx") keeps those in that format,
    None: either."""
    from huggingface_hub import HfApi

    if sort not in SORTS:
        raise DownloadError(f"cannot sort by {sort!r}: use {', '.join(SORTS)}")
    if fmt is not None and fmt not in FORMATS:
        raise DownloadError(f"unknown format {fmt!r}: use {' or '.join(FORMATS)}")
    limit = max(1, min(limit, MAX_LIMIT))
    api = HfApi(endpoint=hf_hub._endpoint(), token=hf_hub._token())
    # the Hub's filter is one tag (or several, all required), so "either" is two searches
    wanted = (fmt,) if fmt else FORMATS
    found: dict[str, HubRepo] = {}
    with hf_hub.hub_errors("the Hub", "the model search"):
        for tag in wanted:
            for info in api.list_models(search=query or None, filter=tag, sort=SORTS[sort],
                                        limit=limit, expand=EXPAND):
                found.setdefault(info.id, _repo(info))
    repos = list(found.values())
    key = {"downloads": lambda r: r.downloads, "likes": lambda r: r.likes,
           "trending": lambda r: r.downloads,
           "recent": lambda r: r.last_modified.timestamp() if r.last_modified else 0.0}[sort]
    return sorted(repos, key=key, reverse=True)[:limit]


def _repo(info: ModelInfo) -> HubRepo:
    tags = tuple(info.tags or ())
    licence = next((t.removeprefix("license:") for t in tags if t.startswith("license:")), None)
    formats = tuple(f for f in FORMATS if f in tags or info.library_name == f)
    return HubRepo(info.id, int(info.downloads or 0), int(info.likes or 0), info.last_modified,
                   licence, bool(info.gated), formats, info.pipeline_tag)
