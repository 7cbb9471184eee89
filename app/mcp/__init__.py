"""MCP (Model Context Protocol) servers in the desktop chat: mcp.json (config), the live
connections through the official SDK (connections), the tools a conversation offers and the
approvals a call waits for (tool_loop, approvals). The API server never runs MCP tools: it
passes its clients' tools through (DESIGN.md, "Tool calls, thinking and the wire")."""
