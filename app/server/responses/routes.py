"""OpenAI's Responses API: POST /v1/responses (whole or streamed, continuing a stored
response by previous_response_id), GET and DELETE /v1/responses/{id}. Codex and other agents
speak it; the wire mapping is app.server.responses.inbound (in) and .wire (out)."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from itertools import count

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.server.bridge import check_model_name, open_events, until_disconnected
from app.server.errors import ApiError, error_for_event
from app.server.generation_request import LEFT_OUT_HEADER, chat_request, sampling, with_speculative
from app.server.heartbeat import SSE_COMMENT, with_heartbeats
from app.server.mcp_rounds import McpCallEvent
from app.server.media_inbound import MediaSource, off_loop
from app.server.openai.schemas import ErrorResponse
from app.server.responses import wire as responses_wire
from app.server.responses.inbound import (
    responses_format,
    responses_messages,
    responses_param,
    responses_thinking,
    responses_tool_choice,
)
from app.server.responses.mcp import mcp_call_item
from app.server.responses.schemas import (
    DeletedResponse,
    ResponseCreateRequest,
    ResponseError,
    ResponseObject,
)
from app.server.responses.store import MAX_AGE_S, MAX_RESPONSES, ResponseStore
from app.server.responses.tools import OfferedTools, offered_tools
from app.server.server_tools import asked
from backends.base import (
    DoneEvent,
    ErrorEvent,
    Event,
    GenerationRequest,
    LogprobEvent,
    Message,
    SamplingParams,
    Stats,
    ToolChoice,
)
from backends.errors import InvalidRequestError
from backends.media import plain_text

router = APIRouter(prefix="/v1", tags=["openai"])
ERRORS: dict[int | str, dict] = {status: {"model": ErrorResponse}
                                 for status in (400, 401, 404, 429, 500, 502)}


def _store(request: Request) -> ResponseStore:
    store: ResponseStore = request.app.state.responses
    return store


def _not_found(response_id: str, param: str | None = None) -> ApiError:
    return ApiError(404, f"no response with id {response_id[:80]!r}: it was never stored "
                    f"(store: false), was deleted, or has expired (Ember keeps at most "
                    f"{MAX_RESPONSES} responses, for {MAX_AGE_S / 3600:g} hour)", param=param,
                    code="previous_response_not_found" if param else "not_found")


def _check(gen_request: GenerationRequest, offered: OfferedTools) -> None:
    """GenerationRequest's own checks, their wire paths as the Responses API names them. A
    request that asks for MCP servers (`ember serve --mcp`) gets its tool_choice checked
    once their tools are added (open_events): required, or a named MCP tool, is met then."""
    if asked() is not None:
        gen_request = replace(gen_request, tool_choice=ToolChoice())
    try:
        gen_request.validate()
    except InvalidRequestError as e:
        raise InvalidRequestError(str(e), offered.wire_param(responses_param(e.param))) from e


@router.post("/responses", response_model=ResponseObject, responses=ERRORS)
async def create_response(body: ResponseCreateRequest, request: Request) -> Response:
    """A response to `input`, after the conversation of `previous_response_id` if given.
    Kept for later turns, GET and DELETE unless `store` is false."""
    model = check_model_name(body.model)
    if body.background:
        raise ApiError(400, "background responses are not supported: Ember answers every "
                       "request at once (leave out background, or set it false)", "background")
    if body.conversation is not None:
        raise ApiError(400, "conversation objects are not supported: continue a conversation "
                       "with previous_response_id, or send its items in input",
                       "conversation")
    earlier: tuple[Message, ...] = ()
    if body.previous_response_id is not None:
        previous = _store(request).get(body.previous_response_id)
        if previous is None:
            raise _not_found(body.previous_response_id, "previous_response_id")
        earlier = previous.conversation
    offered = offered_tools(body.tools)
    conversation = await off_loop(functools.partial(
        responses_messages, body.input, earlier, visible=offered.visible,
        media=MediaSource.of(request.app.state.settings)))
    system = (Message("system", plain_text(body.instructions)),) if body.instructions else ()
    json_mode, schema = responses_format(body.text)
    params = sampling(temperature=body.temperature, top_p=body.top_p,
                      max_tokens=body.max_output_tokens)
    gen_request = with_speculative(chat_request(
        system + conversation, params, json_mode, schema, offered=offered.tools,
        tool_choice=responses_tool_choice(body.tool_choice),
        parallel_tool_calls=body.parallel_tool_calls is not False,
        thinking=responses_thinking(body.reasoning), cache_key=body.prompt_cache_key),
        body.speculative)
    _check(gen_request, offered)
    events = await open_events(request.app.state, model, gen_request, "responses")
    answer = _Answer(body, _store(request), conversation, gen_request.sampling, offered)
    headers = {LEFT_OUT_HEADER: ", ".join(offered.left_out)} if offered.left_out else None
    if not body.stream:
        async def whole() -> None:
            async for event in events:
                if isinstance(event, ErrorEvent):
                    raise error_for_event(event)
                answer.add(event)

        try:
            await until_disconnected(request, whole)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        if not answer.done:
            raise RuntimeError("stream ended without a final event")
        return JSONResponse(answer.done, headers=headers)
    return StreamingResponse(with_heartbeats(_sse(answer, events), SSE_COMMENT),
                             media_type="text/event-stream",
                             headers=headers)


class _Answer:
    """One response being made: its items from the events, then its end (stored when asked)."""

    def __init__(self, body: ResponseCreateRequest, store: ResponseStore,
                 conversation: tuple[Message, ...], params: SamplingParams,
                 offered: OfferedTools) -> None:
        self.body, self.store, self.conversation, self.params = body, store, conversation, params
        self.offered = offered
        self.id = responses_wire.new_id("resp")
        self.created_at = int(time.time())
        self.output = responses_wire.OutputItems(offered.wire_name)
        self.done: dict = {}

    def response(self, status: responses_wire.Status, stats: Stats | None = None,
               error: ResponseError | None = None) -> ResponseObject:
        return responses_wire.response_object(self.body, self.id, self.created_at,
                                              self.params, status, self.output.items, stats,
                                              error)

    def add(self, event: Event | McpCallEvent) -> list[dict]:
        """The stream events of one generation event; the last one, DoneEvent, ends it."""
        if isinstance(event, McpCallEvent):  # `ember serve --mcp` ran a call
            return self.output.mcp_call(mcp_call_item(event))
        if isinstance(event, DoneEvent):
            return self.finish(event)
        if isinstance(event, ErrorEvent):
            return self.fail(event)
        if isinstance(event, LogprobEvent):  # this route does not ask for logprobs (yet)
            return []
        return self.output.add(event)

    def finish(self, done: DoneEvent) -> list[dict]:
        events = self.output.finish(done)
        status = responses_wire.status_of(done.stats)
        self.done = responses_wire.dump(self.response(status, done.stats))
        if self.body.store:
            turn = responses_messages(responses_wire.as_input(self.output.items),
                                      self.conversation, from_model=True,
                                      visible=self.offered.visible)
            self.store.put(self.id, self.done, turn)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, {"type": kind, "response": self.done}]

    def fail(self, event: ErrorEvent) -> list[dict]:
        err = error_for_event(event)
        self.output.abandon()
        failed = self.response("failed", error=ResponseError(
            code="invalid_prompt" if err.status == 400 else "server_error",
            message=err.message))
        return [{"type": "error", "code": err.code, "message": err.message, "param": err.param},
                {"type": "response.failed", "response": responses_wire.dump(failed)}]


async def _sse(answer: _Answer, events: AsyncIterator[Event]) -> AsyncIterator[str]:
    """`event: TYPE` and `data: {...}` per event, numbered in `sequence_number`."""
    numbers = count()

    def frame(event: dict) -> str:
        event = {**event, "sequence_number": next(numbers)}
        return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"

    start = responses_wire.dump(answer.response("in_progress"))
    yield frame({"type": "response.created", "response": start})
    yield frame({"type": "response.in_progress", "response": start})
    async for event in events:
        for out in answer.add(event):
            yield frame(out)


@router.get("/responses/{response_id}", response_model=ResponseObject, responses=ERRORS)
def get_response(response_id: str, request: Request) -> JSONResponse:
    """A stored response, as it was sent."""
    stored = _store(request).get(response_id)
    if stored is None:
        raise _not_found(response_id)
    return JSONResponse(stored.body)


@router.delete("/responses/{response_id}", response_model=DeletedResponse, responses=ERRORS)
def delete_response(response_id: str, request: Request) -> DeletedResponse:
    """Forget a stored response: later turns can no longer continue it."""
    if not _store(request).delete(response_id):
        raise _not_found(response_id)
    return DeletedResponse(id=response_id)

