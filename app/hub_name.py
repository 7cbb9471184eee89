"""The names of Hugging Face repos, as Ollama and the Hub's own URLs write them:
hf.co/OWNER/REPO[:QUANT], huggingface.co/..., https://huggingface.co/... (a pasted page URL
too), or OWNER/REPO[:QUANT]. Read once here for `ember pull` (app.pull.hf_pull), the store
(a pulled model answers to the name it was pulled by) and the server's routes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.errors import DownloadError

PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "https://hf.co/",
            "huggingface.co/", "hf.co/")
_REPO_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


@dataclass(frozen=True)
class HubName:
    repo: str  # owner/name, as the Hub spells it
    quant: str | None

    @property
    def model_id(self) -> str:
        """The store's id: the repo as one slug (a "/" would name a remote endpoint)."""
        return hub_model_id(self.repo)


def hub_model_id(repo: str) -> str:
    from app.store import slug

    return slug(repo.replace("/", "-"))


def has_hub_prefix(name: str) -> bool:
    """Whether `name` says it is a Hub repo (hf.co/..., huggingface.co/...): for the commands
    where a bare OWNER/REPO is a remote endpoint's model instead (`ember run`, `chat`)."""
    return name.lower().startswith(PREFIXES)


def is_hub_name(name: str) -> bool:
    """Whether `name` names a Hub repo rather than a registry model (whose ids have no "/")."""
    return name.lower().startswith(PREFIXES) or "/" in name.partition(":")[0]


def parse_hub_name(name: str) -> HubName:
    """OWNER/REPO[:QUANT] from any of the spellings; a clear error for anything else."""
    rest = name.strip()
    for prefix in PREFIXES:
        if rest.lower().startswith(prefix):
            rest = rest[len(prefix):]
            break
    path, _, quant = rest.partition(":")
    parts = [p for p in path.split("/") if p]
    if len(parts) > 2 and parts[2] in ("tree", "blob", "resolve"):  # a pasted page URL
        parts = parts[:2]
    if len(parts) != 2 or not all(_REPO_PART.match(p) and p not in (".", "..") and
                                  ".." not in p for p in parts):
        raise DownloadError(f"{name!r} is not a Hub model: use hf.co/OWNER/REPO[:QUANT]")
    quant = quant.strip()
    if quant and not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", quant):
        raise DownloadError(f"{quant!r} is not a quantization name (e.g. Q4_K_M)")
    return HubName("/".join(parts), quant or None)
