"""Where Ember keeps its files, and the settings that can come from the environment.

Data dir: `EMBER_HOME` if set, else the platform's user data dir (platformdirs). It holds
`models/`, `history.db`, `config.toml`, `logs/` (app.logs), the window's MCP
servers, `mcp.json` (app.mcp), and `kv-cache/`, conversations' saved KV caches, at most
EMBER_KV_CACHE_GB gigabytes (4 unless set; 0 saves none).
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import tomlkit

from app import resources
from app.errors import ConfigError
from app.file_modes import private_dir

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"


@dataclass(frozen=True)
class Paths:
    home: Path

    @property
    def models(self) -> Path:
        return self.home / "models"

    @property
    def partial(self) -> Path:
        """Downloads in progress: on the same filesystem as `models/`, so installs are renames."""
        return self.home / "models" / ".partial"

    @property
    def history_db(self) -> Path:
        return self.home / "history.db"

    @property
    def documents_db(self) -> Path:
        """The documents attached to conversations (app.documents.library)."""
        return self.home / "documents.db"

    @property
    def config_file(self) -> Path:
        return self.home / "config.toml"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def mcp_file(self) -> Path:
        """The window's MCP servers, in the mcpServers form Cursor and Claude Desktop use."""
        return self.home / "mcp.json"

    @property
    def kv_cache(self) -> Path:
        """Conversations' KV caches saved when a model unloads, for after a restart
        (backends/llamacpp/kv_store.py)."""
        return self.home / "kv-cache"

    @property
    def kernel_tuning(self) -> Path:
        """The cuda engine's GEMV launch configs swept on each GPU (kernels.gemv_config, which
        repeats this rule: kernels/ may not import app/)."""
        return self.home / "cache" / "kernel-tuning.json"

    @property
    def mcp_approvals(self) -> Path:
        """The MCP tools the user allowed always (app.mcp.approvals)."""
        return self.home / "mcp-approvals.json"


def paths() -> Paths:
    home = os.environ.get("EMBER_HOME")
    root = Path(home).expanduser() if home else Path(platformdirs.user_data_dir("ember"))
    return Paths(home=private_dir(root))


def registry_file() -> Path:
    """EMBER_REGISTRY, else the built-in registry (app.resources: a checkout, a wheel or a
    bundle)."""
    override = os.environ.get("EMBER_REGISTRY")
    return Path(override) if override else resources.registry_file()


def load_config(p: Paths | None = None) -> dict:
    """The user's config.toml, or {} when there is none. A broken file is an error, not a reset."""
    path = (p or paths()).config_file
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e}); fix or move the file") from e


def update_config(edit: Callable[[tomlkit.TOMLDocument], None],
                  p: Paths | None = None) -> None:
    """Apply `edit` to config.toml and write it back. tomlkit keeps the user's comments,
    order and other keys as they were; the new file replaces the old one by rename, so a
    crash mid-write leaves the old file, never half of one. Owner-only: it holds API keys."""
    path = (p or paths()).config_file
    text = ""
    if path.exists():
        text = path.read_text(encoding="utf-8")
        load_config(p)  # a broken file is reported, not overwritten
    doc = tomlkit.parse(text)
    edit(doc)
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(tomlkit.dumps(doc))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def env_int(name: str, default: int | None = None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as e:
        raise ConfigError(f"{name}={raw!r} is not an integer") from e


def kv_cache_bytes() -> int:
    """The size limit of the saved KV caches (`Paths.kv_cache`): EMBER_KV_CACHE_GB, 4 GB unless
    set."""
    gb = env_int("EMBER_KV_CACHE_GB", 4)
    return max(0, gb or 0) << 30
