"""MCP (Model Context Protocol) servers: mcp.json (config), the live connections through the
official SDK (connections), the tools a conversation offers and the approvals a call waits for
(tool_loop, approvals). The window runs them per call with the user's approval; the API server
runs them only under `ember serve --mcp`, for requests that ask, and only the tools the user
allowed (app.server.server_tools); otherwise it passes its clients' tools through
(docs/architecture.md, "Chat templates, tool calls and thinking")."""
