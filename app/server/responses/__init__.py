"""OpenAI's Responses API: routes, schemas, inbound conversion, wire, its function tools'
namespaces (tools), MCP calls (mcp) and the stored responses of previous_response_id (store)."""
