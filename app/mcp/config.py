"""mcp.json: the MCP servers the window may use, in the form Cursor and Claude Desktop read.

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem"],
                  "env": {"DEBUG": "1"}},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer …"}}}}

A server has a `command` (stdio: Ember starts it) or a `url` (streamable HTTP), never both.
Ember also reads `cwd`, `timeout` (seconds a call may take), `maxResultBytes` (how much of a
result reaches the model, 64 KiB unless set) and `disabled`; `type` is accepted
when it agrees with the rest ("stdio", "http", "streamable-http"). Every other key is an error
that names it, so a typo ("comand") is never a server that silently does nothing.

A broken file is reported, never rewritten: `save_mcp_text` checks the new text first and
replaces the file by rename only when it is valid.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.errors import ConfigError
from app.file_modes import private_dir

DEFAULT_TIMEOUT_S = 60.0  # a tool call's limit: MCP servers do real work (searches, builds)
STARTUP_TIMEOUT_S = 20.0  # starting a server and listing its tools (npx may install first)
SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
KEYS = {"command", "args", "env", "cwd", "url", "headers", "timeout", "maxResultBytes",
        "disabled", "type"}
DEFAULT_MAX_RESULT_BYTES = 64 << 10  # a tool result the model reads; the rest is cut
STDIO_TYPES = {"stdio"}
HTTP_TYPES = {"http", "streamable-http", "streamableHttp", "streamable_http"}
EXAMPLE = """{
  "mcpServers": {
    "example": {"command": "python", "args": ["-m", "my_mcp_server"], "env": {}}
  }
}
"""


class McpConfigError(ConfigError):
    pass


@dataclass(frozen=True)
class McpServerConfig:
    """One entry of mcpServers: a stdio `command` with `args`, `env` and `cwd`, or a
    streamable-HTTP `url` with `headers`."""
    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    disabled: bool = False

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    @property
    def where(self) -> str:
        """How the user recognises the server: its command line or its address."""
        return " ".join((self.command or "", *self.args)) if self.command else self.url or ""


def _strings(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise McpConfigError(f"{what} must be an object of strings, like "
                             '{"NAME": "value"}')
    return dict(value)


def _server(name: str, entry: Any) -> McpServerConfig:
    where = f'mcpServers["{name}"]'
    if not SERVER_NAME.match(name):
        raise McpConfigError(f"{where}: a server name takes 1 to 40 letters, digits, '_', '-' "
                             "or '.'")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where} must be an object with a \"command\" or a \"url\"")
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        raise McpConfigError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(repr(k) for k in unknown)} (Ember reads "
                             f"{', '.join(sorted(KEYS))})")
    command, url = entry.get("command"), entry.get("url")
    if command is not None and url is not None:
        raise McpConfigError(f"{where} has both \"command\" and \"url\": a server is either "
                             "started by Ember (command) or reached over HTTP (url)")
    if command is None and url is None:
        raise McpConfigError(f"{where} needs a \"command\" (a program Ember starts) or a "
                             "\"url\" (a streamable-HTTP server)")
    kind = entry.get("type")
    if kind == "sse":
        raise McpConfigError(f"{where}: the old SSE transport is not supported; use the "
                             "server's streamable-HTTP address (usually ending in /mcp)")
    if kind is not None and kind not in (STDIO_TYPES if command is not None else HTTP_TYPES):
        raise McpConfigError(f"{where}: \"type\": {kind!r} does not match its "
                             f"{'command' if command is not None else 'url'}")
    timeout = entry.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise McpConfigError(f"{where}.timeout must be a positive number of seconds, "
                             f"got {timeout!r}")
    cap = entry.get("maxResultBytes", DEFAULT_MAX_RESULT_BYTES)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1024:
        raise McpConfigError(f"{where}.maxResultBytes must be a whole number of bytes, at "
                             f"least 1024, got {cap!r}")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise McpConfigError(f"{where}.disabled must be true or false, got {disabled!r}")
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise McpConfigError(f"{where}.command must be a program name or path")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise McpConfigError(f"{where}.args must be a list of strings")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise McpConfigError(f"{where}.cwd must be a folder path")
        if "headers" in entry:
            raise McpConfigError(f"{where}: \"headers\" go with a \"url\", not a command")
        return McpServerConfig(name, command=command, args=tuple(args),
                               env=_strings(entry.get("env", {}), f"{where}.env"), cwd=cwd,
                               timeout_s=float(timeout), max_result_bytes=cap,
                               disabled=disabled)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise McpConfigError(f"{where}.url must be an http:// or https:// address, got {url!r}")
    for key in ("args", "env", "cwd"):
        if key in entry:
            raise McpConfigError(f"{where}: \"{key}\" goes with a \"command\", not a url")
    return McpServerConfig(name, url=url,
                           headers=_strings(entry.get("headers", {}), f"{where}.headers"),
                           timeout_s=float(timeout), max_result_bytes=cap, disabled=disabled)


def parse_mcp_config(text: str, source: str = "mcp.json") -> dict[str, McpServerConfig]:
    """The servers of an mcp.json text, by name; an McpConfigError names the first problem."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise McpConfigError(f"{source} is not valid JSON: {e.msg} at line {e.lineno}, "
                             f"column {e.colno}") from e
    if not isinstance(data, dict) or "mcpServers" not in data:
        raise McpConfigError(f"{source} must be an object with \"mcpServers\": "
                             '{"mcpServers": {"name": {"command": ...}}}')
    servers = data["mcpServers"]
    if not isinstance(servers, dict):
        raise McpConfigError(f"{source}: \"mcpServers\" must be an object of servers by name")
    try:
        return {name: _server(name, entry) for name, entry in servers.items()}
    except McpConfigError as e:
        raise McpConfigError(f"{source}: {e}") from None


def read_mcp_text(path: Path) -> str:
    """The file as the user wrote it ("" when there is none)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as e:
        raise McpConfigError(f"{path} could not be read: {e}") from e


def load_mcp_config(path: Path) -> dict[str, McpServerConfig]:
    return parse_mcp_config(read_mcp_text(path), str(path))


def save_mcp_text(path: Path, text: str) -> dict[str, McpServerConfig]:
    """Check `text`, then write it in place of `path` by rename (a crash leaves the old file);
    invalid text raises McpConfigError and the file stays as it was."""
    servers = parse_mcp_config(text, path.name)
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=".mcp-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") or not text else text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)  # headers and env often hold API keys
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return servers
