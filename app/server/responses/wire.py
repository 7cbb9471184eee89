"""Ember's answer -> the Responses API's wire: output items (reasoning, an assistant message,
function calls), usage, the response object, and the events of a streamed response.

One OutputItems turns the events of a generation into items for both a whole response and a
streamed one, so the two list the same items with the same texts; only the ids Ember makes up
(resp_, msg_, rs_, fc_, call_) differ between two requests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Literal, TypeVar

from app.server.openai.wire import new_call_id
from app.server.responses.mcp import mcp_call_events
from app.server.responses.schemas import (
    FunctionCallItem,
    IncompleteDetails,
    InputItem,
    InputTokensDetails,
    McpCallItem,
    MessageItem,
    OutputFunctionCall,
    OutputMcpCall,
    OutputMessage,
    OutputReasoning,
    OutputText,
    OutputTokensDetails,
    ReasoningConfig,
    ReasoningItem,
    ReasoningText,
    ResponseCreateRequest,
    ResponseError,
    ResponseObject,
    ResponseUsage,
    TextConfig,
    TextPart,
)
from backends.base import (
    DoneEvent,
    OutputEvent,
    ReasoningEvent,
    SamplingParams,
    Stats,
    TokenEvent,
    ToolCallEvent,
)

Item = OutputMessage | OutputReasoning | OutputFunctionCall | OutputMcpCall
ItemT = TypeVar("ItemT", OutputMessage, OutputReasoning)
Status = Literal["in_progress", "completed", "incomplete", "failed"]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage(stats: Stats) -> ResponseUsage:
    return ResponseUsage(
        input_tokens=stats.prompt_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=stats.cached_tokens),
        output_tokens=stats.completion_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=stats.reasoning_tokens),
        total_tokens=stats.prompt_tokens + stats.completion_tokens)


def status_of(stats: Stats) -> Status:
    """incomplete when the answer hit max_output_tokens (or the context's end)."""
    return "incomplete" if stats.finish_reason == "length" else "completed"


def response_object(body: ResponseCreateRequest, response_id: str, created_at: int,
                    params: SamplingParams, status: Status, output: list[Item] | None = None,
                    stats: Stats | None = None,
                    error: ResponseError | None = None) -> ResponseObject:
    """The response: what it produced, and the request's settings as they applied
    (temperature and top_p are the ones used, Ember's defaults where the request set none)."""
    return ResponseObject(
        id=response_id, created_at=created_at, status=status,
        completed_at=int(time.time()) if status == "completed" else None,
        incomplete_details=(IncompleteDetails(reason="max_output_tokens")
                            if status == "incomplete" else None),
        error=error, model=body.model, output=output or [],
        usage=usage(stats) if stats is not None else None,
        previous_response_id=body.previous_response_id, instructions=body.instructions,
        tools=body.tools or [], tool_choice=body.tool_choice or "auto",
        parallel_tool_calls=body.parallel_tool_calls is not False,
        temperature=params.temperature, top_p=params.top_p,
        max_output_tokens=body.max_output_tokens,
        reasoning=body.reasoning or ReasoningConfig(), text=body.text or TextConfig(),
        metadata=body.metadata or {}, store=body.store)


def dump(response: ResponseObject) -> dict:
    return response.model_dump(by_alias=True)  # text.format.schema, not schema_


def as_input(items: list[Item]) -> list[InputItem]:
    """Output items as the input items a client sends back with the next turn: a stored
    response continues the conversation exactly as re-sending its items would."""
    out: list[InputItem] = []
    for item in items:
        if isinstance(item, OutputMcpCall):
            out.append(McpCallItem(type="mcp_call", id=item.id, server_label=item.server_label,
                                   name=item.name, arguments=item.arguments,
                                   output=item.output, error=item.error))
        elif isinstance(item, OutputMessage):
            out.append(MessageItem(role="assistant", content=[
                TextPart(type="output_text", text=part.text) for part in item.content]))
        elif isinstance(item, OutputReasoning):
            out.append(ReasoningItem(type="reasoning", id=item.id, content=item.content))
        else:
            out.append(FunctionCallItem(type="function_call", call_id=item.call_id,
                                        name=item.name, arguments=item.arguments, id=item.id,
                                        namespace=item.namespace))
    return out


class OutputItems:
    """A generation's events -> output items, and the stream events that build them (each a
    dict with its `type`; the writer numbers them). A change of kind (thinking, text, a new
    call) closes the item before it: added, its content part, deltas, done."""

    def __init__(self, wire_name: Callable[[str], tuple[str | None, str]] | None = None
                 ) -> None:
        """`wire_name`: a call's namespace and name from the name the model was offered
        (app.server.responses.tools.OfferedTools.wire_name)."""
        self.wire_name = wire_name or (lambda shown: (None, shown))
        self.items: list[Item] = []
        self._open: int | None = None  # the output index of the item being written
        self._calls: dict[int, int] = {}  # a call's index in the answer -> its output index

    def add(self, event: OutputEvent) -> list[dict]:
        if isinstance(event, TokenEvent):
            return self._text(event.text) if event.text else []
        if isinstance(event, ReasoningEvent):
            return self._thought(event.text) if event.text else []
        return self._call(event)

    def mcp_call(self, item: OutputMcpCall) -> list[dict]:
        """An MCP call the server ran (app.server.responses.mcp): the item before it closed,
        then this one's whole life at once."""
        events = self._close("completed")
        self.items.append(item)
        return [*events, *mcp_call_events(len(self.items) - 1, item)]

    def finish(self, done: DoneEvent) -> list[dict]:
        """Close the last item: incomplete when max_output_tokens cut it. A call cut off in its
        arguments is not a call (the DoneEvent leaves it out): it is closed, then dropped."""
        cut = len(self._calls) > len(done.tool_calls)
        last = self.items[self._open] if self._open is not None else None
        whole = isinstance(last, OutputFunctionCall) and not cut
        events = self._close("incomplete" if done.stats.finish_reason == "length"
                             and not whole else "completed")
        if cut:
            del self.items[self._calls.pop(max(self._calls))]
        return events

    def abandon(self) -> None:
        """The generation failed: the item being written stays as far as it got."""
        if self._open is not None:
            self.items[self._open].status = "incomplete"
            self._open = None

    # -- one kind of item each -------------------------------------------------------------
    def _text(self, text: str) -> list[dict]:
        events = []
        if self._open is None or not isinstance(self.items[self._open], OutputMessage):
            events = self._start(OutputMessage(id=new_id("msg"), content=[OutputText()]))
            events.append(self._part_event("response.content_part.added", OutputText()))
        index, message = self._current(OutputMessage)
        message.content[0].text += text
        events.append({"type": "response.output_text.delta", "item_id": message.id,
                       "output_index": index, "content_index": 0, "delta": text,
                       "logprobs": []})
        return events

    def _thought(self, text: str) -> list[dict]:
        events = []
        if self._open is None or not isinstance(self.items[self._open], OutputReasoning):
            events = self._start(OutputReasoning(id=new_id("rs"),
                                                 content=[ReasoningText(text="")]))
            events.append(self._part_event("response.content_part.added",
                                           ReasoningText(text="")))
        index, reasoning = self._current(OutputReasoning)
        reasoning.content[0].text += text
        events.append({"type": "response.reasoning_text.delta", "item_id": reasoning.id,
                       "output_index": index, "content_index": 0, "delta": text})
        return events

    def _call(self, event: ToolCallEvent) -> list[dict]:
        events = []
        if event.index not in self._calls:
            namespace, name = self.wire_name(event.name)
            events = self._start(OutputFunctionCall(
                id=new_id("fc"), call_id=event.id or new_call_id(), name=name,
                namespace=namespace))
            self._calls[event.index] = len(self.items) - 1
        index = self._calls[event.index]
        call = self.items[index]
        assert isinstance(call, OutputFunctionCall)
        if event.arguments:
            call.arguments += event.arguments
            events.append(self._arguments_delta(index, call, event.arguments))
        return events

    # -- the item's life -------------------------------------------------------------------
    def _start(self, item: Item) -> list[dict]:
        events = self._close("completed")
        self.items.append(item)
        self._open = len(self.items) - 1
        added = item.model_dump()
        if isinstance(item, OutputMessage | OutputReasoning):
            added["content"] = []  # the part comes in content_part.added
        return [*events, {"type": "response.output_item.added", "output_index": self._open,
                          "item": added}]

    def _close(self, status: Literal["completed", "incomplete"]) -> list[dict]:
        if self._open is None:
            return []
        index, item = self._open, self.items[self._open]
        self._open = None
        item.status = status
        events = []
        if isinstance(item, OutputMessage):
            text = item.content[0].text
            events += [{"type": "response.output_text.done", "item_id": item.id,
                        "output_index": index, "content_index": 0, "text": text,
                        "logprobs": []},
                       self._part_event("response.content_part.done", item.content[0], index)]
        elif isinstance(item, OutputReasoning):
            text = item.content[0].text
            events += [{"type": "response.reasoning_text.done", "item_id": item.id,
                        "output_index": index, "content_index": 0, "text": text},
                       self._part_event("response.content_part.done", item.content[0], index)]
        else:
            assert isinstance(item, OutputFunctionCall)  # an mcp_call item is never open
            if not item.arguments:  # a call without arguments, as the DoneEvent has it
                item.arguments = "{}"
                events.append(self._arguments_delta(index, item, "{}"))
            events.append({"type": "response.function_call_arguments.done",
                           "item_id": item.id, "output_index": index,
                           "arguments": item.arguments})
        events.append({"type": "response.output_item.done", "output_index": index,
                       "item": item.model_dump()})
        return events

    def _current(self, kind: type[ItemT]) -> tuple[int, ItemT]:
        assert self._open is not None
        item = self.items[self._open]
        assert isinstance(item, kind)
        return self._open, item

    def _part_event(self, kind: str, part: OutputText | ReasoningText,
                    index: int | None = None) -> dict:
        index = self._open if index is None else index
        assert index is not None
        return {"type": kind, "item_id": self.items[index].id, "output_index": index,
                "content_index": 0, "part": part.model_dump()}

    @staticmethod
    def _arguments_delta(index: int, call: OutputFunctionCall, delta: str) -> dict:
        return {"type": "response.function_call_arguments.delta", "item_id": call.id,
                "output_index": index, "delta": delta}
