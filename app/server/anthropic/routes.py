"""Anthropic-compatible routes: /v1/messages (whole and streamed) and
/v1/messages/count_tokens, which Claude Code and other agents built on Anthropic's SDK speak.

Errors on these paths come in Anthropic's shape (app.server.errors.error_body). The
`anthropic-version` and `anthropic-beta` headers are accepted whatever they say; the key
comes as `x-api-key` (or `Authorization: Bearer`), checked by the app's Guard."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.server.anthropic import wire as anthropic_wire
from app.server.anthropic.inbound import (
    anthropic_messages,
    anthropic_server_tools,
    anthropic_thinking,
    anthropic_tool_choice,
    anthropic_tools,
)
from app.server.anthropic.schemas import (
    AnthropicErrorResponse,
    CountTokensRequest,
    MessageResponse,
    MessagesRequest,
    ThinkingAdaptive,
    ThinkingEnabled,
    TokenCount,
)
from app.server.anthropic.wire import sse
from app.server.bridge import (
    check_model_name,
    collect,
    count_prompt_tokens,
    counted_prompt_tokens,
    open_events,
)
from app.server.errors import error_for_event
from app.server.generation_request import LEFT_OUT_HEADER, chat_request, sampling, with_speculative
from app.server.heartbeat import with_heartbeats
from app.server.media_inbound import MediaSource, off_loop
from app.server.server_tools import asked
from backends.base import (
    DoneEvent,
    ErrorEvent,
    GenerationRequest,
    LogprobEvent,
    Message,
    SamplingParams,
)

router = APIRouter(prefix="/v1", tags=["anthropic"])

ERRORS: dict[int | str, dict] = {
    status: {"model": AnthropicErrorResponse, "description": what} for status, what in (
        (400, "The request is malformed (invalid_request_error): the message names the field"),
        (401, "Missing or wrong API key (authentication_error)"),
        (404, "No such model (not_found_error)"),
        (413, "The request body is too large (request_too_large)"),
        (429, "Too many requests queued (rate_limit_error)"),
        (500, "The model failed (api_error)"),
        (502, "A remote model's server failed (api_error)"))}
# One server-sent event as OpenAPI 3.2 (and schemathesis) read a text/event-stream body:
# the event's fields, its data a JSON text (Anthropic's events: message_start, ping, ...)
SSE_EVENT = {"type": "object", "required": ["data"],
             "properties": {"event": {"type": "string"},
                            "data": {"type": "string", "contentMediaType": "application/json"},
                            "id": {"type": "string"}, "retry": {"type": "integer"}}}
STREAMED: dict[int | str, dict] = {200: {
    "description": "The message (application/json), or with `stream` its server-sent events "
                   "(text/event-stream)",
    "content": {"text/event-stream": {"schema": SSE_EVENT}}}}


async def _conversation(body: CountTokensRequest, request: Request) -> tuple[Message, ...]:
    """The request's conversation, read off the event loop (its images are decoded)."""
    return await off_loop(anthropic_messages, body.system, body.messages,
                          MediaSource.of(request.app.state.settings))


def _generation_request(body: CountTokensRequest, messages: tuple[Message, ...],
                        params: SamplingParams, max_tokens: int | None,
                        cache_key: str | None = None) -> GenerationRequest:
    tools = anthropic_tools(body.tools)
    server_names = frozenset(t.name for t in body.tools or () if t.runs_on_anthropic)
    choice, parallel = anthropic_tool_choice(body.tool_choice, tools, server_names,
                                             more_tools=asked() is not None)
    output = body.output_config
    schema = output.format.schema_ if output is not None and output.format is not None \
        else None
    return chat_request(messages, params,
                        json_schema=schema, offered=tools, tool_choice=choice,
                        parallel_tool_calls=parallel,
                        thinking=anthropic_thinking(body.thinking, max_tokens, output),
                        cache_key=cache_key)


def _shows_thinking(body: CountTokensRequest) -> bool:
    """display "omitted": thinking blocks come without their text."""
    config = body.thinking
    return not (isinstance(config, ThinkingEnabled | ThinkingAdaptive)
                and config.display == "omitted")


@router.post("/messages", response_model=MessageResponse, responses=STREAMED | ERRORS)
async def messages(body: MessagesRequest, request: Request) -> Response:
    """A message, whole or streamed (`stream`: server-sent events message_start, ping,
    content_block_start/delta/stop per block, message_delta, message_stop).

    A streamed message_start gives the prompt's length as input_tokens (counted before
    generating); what the prefix cache reused is known only when the answer ends, so
    message_delta carries the final split (input_tokens and cache_read_input_tokens, which
    Anthropic's SDK takes over into the message). `thinking.budget_tokens` is checked but
    not enforced: only max_tokens bounds the thinking (anthropic_thinking says why)."""
    model = check_model_name(body.model)
    params = sampling(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                      stop=body.stop_sequences, max_tokens=body.max_tokens)
    # the cache key: metadata.user_id, which Claude Code makes one per session
    cache_key = body.metadata.user_id if body.metadata is not None else None
    messages = await _conversation(body, request)
    gen_request = with_speculative(_generation_request(body, messages, params, body.max_tokens,
                                                       cache_key or None), body.speculative)
    events = await open_events(request.app.state, model, gen_request, "messages",
                               backend=body.backend)
    message_id = anthropic_wire.new_message_id()
    show_thinking = _shows_thinking(body)
    left_out = anthropic_server_tools(body.tools)
    headers = {LEFT_OUT_HEADER: ", ".join(left_out)} if left_out else {}
    if not body.stream:
        final = await collect(request, events)
        answer = MessageResponse(
            id=message_id, model=body.model,
            content=anthropic_wire.content(final, show_thinking),
            stop_reason=anthropic_wire.stop_reason(final.stats),
            stop_sequence=anthropic_wire.matched_stop(final.stats),
            usage=anthropic_wire.usage(final.stats))
        return JSONResponse(answer.model_dump(), headers=headers)

    blocks = anthropic_wire.StreamBlocks(show_thinking)
    prompt_tokens = counted_prompt_tokens()

    async def stream() -> AsyncIterator[str]:
        start = MessageResponse(id=message_id, model=body.model, content=[], stop_reason=None,
                                usage=anthropic_wire.usage_at_start(prompt_tokens))
        yield sse("message_start", {"type": "message_start", "message": start.model_dump()})
        yield sse("ping", {"type": "ping"})
        async for event in events:
            if isinstance(event, DoneEvent):
                for line in blocks.close():
                    yield line
                yield sse("message_delta", {
                    "type": "message_delta",
                    "delta": {"stop_reason": anthropic_wire.stop_reason(event.stats),
                              "stop_sequence": anthropic_wire.matched_stop(event.stats)},
                    "usage": anthropic_wire.usage(event.stats).model_dump()})
                yield sse("message_stop", {"type": "message_stop"})
            elif isinstance(event, ErrorEvent):
                yield sse("error", error_for_event(event).anthropic())
            elif not isinstance(event, LogprobEvent):  # Anthropic's API has no logprobs
                for line in blocks.of(event):
                    yield line

    return StreamingResponse(with_heartbeats(stream(), sse("ping", {"type": "ping"})),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", **headers})


@router.post("/messages/count_tokens", response_model=TokenCount, responses=ERRORS)
async def count_tokens(body: CountTokensRequest, request: Request) -> TokenCount:
    """The prompt's length for the model: its chat template rendered with the tools and the
    thinking setting, tokenized by the model (loaded if need be). A message of the same
    request reports the same count (usage input_tokens + cache_read_input_tokens), unless
    its prompt had to lose old turns to fit the context. Local models only: a remote
    model's server tokenizes its own prompts (a 400 says so)."""
    model = check_model_name(body.model)
    gen_request = _generation_request(body, await _conversation(body, request), sampling(),
                                      None)
    return TokenCount(input_tokens=await count_prompt_tokens(
        request.app.state, model, gen_request, body.backend))
