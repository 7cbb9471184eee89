"""What the chat needs for MCP tools, in one place the window owns: the servers of mcp.json,
the open connections (closed with the window), and the "Allow always" choices."""

from __future__ import annotations

from app.config import Paths
from app.mcp.approvals import Approvals
from app.mcp.config import McpConfigError, McpServerConfig, load_mcp_config
from app.mcp.connections import McpConnections


class ChatTools:
    def __init__(self, home: Paths) -> None:
        self.home = home
        self.connections = McpConnections()
        self.approvals = Approvals(home.mcp_approvals)

    def servers(self) -> dict[str, McpServerConfig]:
        """The servers of mcp.json that are not disabled; McpConfigError for a broken file."""
        return {name: c for name, c in load_mcp_config(self.home.mcp_file).items()
                if not c.disabled}

    def servers_or_error(self) -> tuple[dict[str, McpServerConfig], str]:
        try:
            return self.servers(), ""
        except McpConfigError as e:
            return {}, str(e)

    def close(self) -> None:
        self.connections.close()
