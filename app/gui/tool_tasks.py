"""The MCP work of the chat, off the UI thread (app.gui.thread_task): starting servers and
listing their tools, and running one call."""

from __future__ import annotations

from PySide6.QtCore import Signal

from app.gui.thread_task import ThreadTask
from app.mcp.config import McpServerConfig
from app.mcp.connections import McpConnections, McpServerError


class ToolListTask(ThreadTask):
    """Start (or reuse) the connections to `servers` and list their tools."""
    thread_name = "ember-gui-mcp-list"
    listed = Signal(list, dict)  # [McpTool], {server: the line that says why it failed}

    def __init__(self, connections: McpConnections, servers: list[McpServerConfig]) -> None:
        super().__init__()
        self.connections, self.servers = connections, servers

    def _run(self) -> None:
        try:
            tools, failed = self.connections.tools(self.servers)
        except Exception as e:  # a bug must not leave the chat waiting forever
            tools, failed = [], {s.name: f"{type(e).__name__}: {e}" for s in self.servers}
        self.listed.emit(tools, failed)


class ToolCallTask(ThreadTask):
    """Run one tool call on its server."""
    thread_name = "ember-gui-mcp-call"
    done = Signal(object)  # app.mcp.connections.McpResult
    failed = Signal(str)  # one line: why the call could not run

    def __init__(self, connections: McpConnections, server: McpServerConfig, tool: str,
                 arguments: dict) -> None:
        super().__init__()
        self.connections, self.server, self.tool, self.arguments = (connections, server, tool,
                                                                   arguments)

    def _run(self) -> None:
        try:
            result = self.connections.call(self.server, self.tool, self.arguments)
        except McpServerError as e:
            self.failed.emit(str(e))
        except Exception as e:
            self.failed.emit(f"MCP server {self.server.name}: {type(e).__name__}: {e}")
        else:
            self.done.emit(result)
