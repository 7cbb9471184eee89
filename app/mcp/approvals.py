"""The MCP tools the user allowed always: a small JSON file in the data folder,
{"allowed": ["server/tool#definition", ...]}, so the choice outlives the window.

An approval holds for the server as it was defined when the user gave it: `definition` is a
hash of its command, args, cwd, url and the names of its env and headers, so an mcp.json edit
that points the name at another program or address asks again (entries of older Embers,
without one, allow nothing).

An unreadable file allows nothing (the safe side) and is never overwritten: Allow always then
says why it cannot be remembered.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from app.file_modes import private_dir
from app.mcp.config import McpConfigError, McpServerConfig


def definition(config: McpServerConfig) -> str:
    """The server's identity for approvals: what it runs or reaches, not its values' secrets
    (env and header values, e.g. a rotated token, do not void an approval)."""
    shape = {"command": config.command, "args": list(config.args), "cwd": config.cwd,
             "url": config.url, "env": sorted(config.env), "headers": sorted(config.headers)}
    blob = json.dumps(shape, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _key(config: McpServerConfig, tool: str) -> str:
    return f"{config.name}/{tool}#{definition(config)}"


class Approvals:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> set[str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return set()
        except (OSError, ValueError) as e:
            raise McpConfigError(f"{self.path} could not be read ({e}); fix or remove it") from e
        allowed = data.get("allowed") if isinstance(data, dict) else None
        if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
            raise McpConfigError(f"{self.path} must be {{\"allowed\": [\"server/tool\", ...]}}")
        return set(allowed)

    def allowed(self, config: McpServerConfig, tool: str) -> bool:
        try:
            return _key(config, tool) in self._read()
        except McpConfigError:
            return False

    def all(self) -> list[str]:
        """The allowed tools as the user knows them, "server/tool"."""
        return sorted({entry.partition("#")[0] for entry in self._read()})

    def allow_always(self, config: McpServerConfig, tool: str) -> None:
        self._write(self._read() | {_key(config, tool)})

    def forget(self, server: str, tool: str) -> None:
        """Every approval of `server/tool`, whatever the server's definition was."""
        self._write({entry for entry in self._read()
                     if entry.partition("#")[0] != f"{server}/{tool}"})

    def _write(self, allowed: set[str]) -> None:
        private_dir(self.path.parent)
        fd, tmp = tempfile.mkstemp(prefix=".approvals-", suffix=".json", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"allowed": sorted(allowed)}, f, indent=2)
                f.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
