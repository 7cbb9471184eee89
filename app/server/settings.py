"""`ember serve`'s settings, with their defaults written once: the server reads them, and
the CLI's options (app.cli.serve) take their defaults from here. No web framework is
imported, so the CLI can read them without the server's extra installed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# Which field carries the thinking in answers: clients split between the two names
# (docs/wire-formats.md C.3); reasoning_content is llama-server's and DeepSeek's.
ReasoningField = Literal["reasoning_content", "reasoning", "both"]


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 11435
    api_key: str | None = None
    insecure_no_auth: bool = False
    cors_origins: tuple[str, ...] = ()
    # a request body's bound: one image at backends.media.MAX_IMAGE_BYTES (20 MB) is 27 MB
    # as base64, and the conversation's text comes with it
    max_body_bytes: int = 32 << 20
    queue_limit: int = 16
    parallel: int = 8  # sequences decoded together (llama-server's -np 8)
    idle_ttl_s: float = 600.0
    open_paths: tuple[str, ...] = field(default=("/health",))
    owns_runtime: bool = True  # False when the window shares its Runtime with the server
    # where OpenAI answers carry thinking unless a request says (its `reasoning_field`)
    reasoning_field: ReasoningField = "reasoning_content"
    # `ember serve --mcp`: requests may ask for mcp.json's servers (app.server.server_tools);
    # mcp_home: the folder of mcp.json and the approvals (None: the data folder)
    mcp: bool = False
    mcp_allow: tuple[str, ...] = ()
    mcp_home: Path | None = None
    # prompt lookup for requests that do not say (backends.base.DEFAULT_SPECULATION);
    # `ember serve --no-speculation` turns it off
    speculation: bool = True
    # images named by http(s) URL: fetched only with `ember serve --allow-media-urls`, and
    # from loopback, private and link-local addresses only with --allow-private-media-urls
    # (app.server.media_fetch: fetching is a way into the user's network)
    media_urls: bool = False
    media_urls_private: bool = False
