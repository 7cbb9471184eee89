"""The MCP tools the user allowed always: a small JSON file in the data folder,
{"allowed": ["server/tool", ...]}, so the choice outlives the window.

An unreadable file allows nothing (the safe side) and is never overwritten: Allow always then
says why it cannot be remembered.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from app.file_modes import private_dir
from app.mcp.config import McpConfigError


def _key(server: str, tool: str) -> str:
    return f"{server}/{tool}"


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

    def allowed(self, server: str, tool: str) -> bool:
        try:
            return _key(server, tool) in self._read()
        except McpConfigError:
            return False

    def all(self) -> list[str]:
        return sorted(self._read())

    def allow_always(self, server: str, tool: str) -> None:
        self._write(self._read() | {_key(server, tool)})

    def forget(self, server: str, tool: str) -> None:
        self._write(self._read() - {_key(server, tool)})

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
