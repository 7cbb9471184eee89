"""The MCP calls `ember serve --mcp` ran for a Responses request, as OpenAI's Responses API
shows remote MCP calls: an `mcp_call` output item each, before the answer that used them, and
in a stream the events that build it (output_item.added, mcp_call_arguments.delta/done,
mcp_call.in_progress, mcp_call.completed or failed, output_item.done). The call has run when
Ember learns of it, so its events come together."""

from __future__ import annotations

import uuid

from app.server.mcp_rounds import McpCallEvent
from app.server.responses.schemas import OutputMcpCall


def mcp_call_item(event: McpCallEvent) -> OutputMcpCall:
    """The call's item: a failed call (the tool's error, a crash, a refusal) has no output
    and OpenAI's tool-execution error holding the text the model read."""
    failed = event.error
    error = {"type": "mcp_tool_execution_error",
             "content": [{"type": "text", "text": event.output}]}
    return OutputMcpCall(id=f"mcp_{uuid.uuid4().hex}", server_label=event.server,
                         name=event.tool, arguments=event.call.arguments or "{}",
                         output=None if failed else event.output,
                         error=error if failed else None,
                         status="failed" if failed else "completed")


def mcp_call_events(index: int, item: OutputMcpCall) -> list[dict]:
    """The stream events of the item at output index `index` (each a dict with its `type`;
    the writer numbers them)."""
    ids = {"item_id": item.id, "output_index": index}
    added = item.model_copy(update={"arguments": "", "output": None, "error": None,
                                    "status": "in_progress"})
    end = "response.mcp_call.failed" if item.status == "failed" else \
        "response.mcp_call.completed"
    return [{"type": "response.output_item.added", "output_index": index,
             "item": added.model_dump()},
            {"type": "response.mcp_call_arguments.delta", **ids, "delta": item.arguments},
            {"type": "response.mcp_call_arguments.done", **ids, "arguments": item.arguments},
            {"type": "response.mcp_call.in_progress", **ids},
            {"type": end, **ids},
            {"type": "response.output_item.done", "output_index": index,
             "item": item.model_dump()}]
