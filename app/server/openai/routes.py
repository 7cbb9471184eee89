"""OpenAI-compatible routes: /v1/models, chat/completions, completions, embeddings."""

from __future__ import annotations

import base64
import json
import sys
import time
import uuid
from array import array
from collections.abc import AsyncIterator
from dataclasses import replace

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.server.bridge import check_model_name, collect, embed, open_events
from app.server.errors import ApiError, error_for_event
from app.server.generation_request import (
    chat_request,
    completion_request,
    offered_tools,
    sampling,
    top_logprobs,
    with_speculative,
)
from app.server.heartbeat import SSE_COMMENT, with_heartbeats
from app.server.media_inbound import MediaSource, off_loop
from app.server.model_name import ModelName
from app.server.openai import wire as openai_wire
from app.server.openai.inbound import openai_messages, openai_thinking, openai_tool_choice
from app.server.openai.schemas import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionChoice,
    CompletionRequest,
    EmbeddingData,
    EmbeddingRequest,
    EmbeddingResponse,
    EmbeddingUsage,
    ModelCard,
    ModelList,
)
from backends.base import DoneEvent, ErrorEvent, LogprobEvent, TokenEvent, TokenLogprob
from backends.media import plain_text

router = APIRouter(prefix="/v1", tags=["openai"])


def _sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


@router.get("/models", response_model=ModelList)
def list_models(request: Request) -> ModelList:
    """Local models, then remote ones as NAME/model (an unreachable endpoint is left out:
    one server down must not break the list)."""
    runtime = request.app.state.runtime
    remote, _ = runtime.remote_models()
    return ModelList(data=[ModelCard(id=m.id, created=int(m.installed_at))
                           for m in runtime.list_models()]
                     + [ModelCard(id=m.ref, created=m.created, owned_by=f"remote:{m.endpoint}")
                        for m in remote])


@router.get("/models/{model:path}", response_model=ModelCard,
            responses={400: {}, 404: {}, 502: {}})
def get_model(model: ModelName, request: Request) -> ModelCard:
    """One model of /v1/models: a local id (or id:QUANT), or a remote NAME/model."""
    runtime = request.app.state.runtime
    name = check_model_name(model)
    runtime.check_model(name)  # 404 for a model that does not exist
    if runtime.is_remote(name):
        remote, _ = runtime.remote_models()
        found = next((m for m in remote if m.ref == name), None)
        if found is not None:
            return ModelCard(id=found.ref, created=found.created,
                             owned_by=f"remote:{found.endpoint}")
        return ModelCard(id=name, created=0, owned_by=f"remote:{name.split('/', 1)[0]}")
    installed = runtime.store.get(name)
    return ModelCard(id=model, created=int(installed.installed_at))


def _json_settings(body: ChatCompletionRequest) -> tuple[bool, dict | None]:
    fmt = body.response_format
    if fmt is None or fmt.type == "text":
        return False, None
    if fmt.type == "json_object":
        return True, None
    if fmt.json_schema is None or fmt.json_schema.schema_ is None:
        raise ApiError(400, "response_format json_schema needs a 'schema'", "response_format")
    return True, fmt.json_schema.schema_


@router.post("/chat/completions", response_model=ChatCompletion,
             responses={400: {}, 401: {}, 404: {}, 429: {}, 500: {}, 502: {}})
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    model = check_model_name(body.model)
    json_mode, schema = _json_settings(body)
    params = sampling(temperature=body.temperature, top_p=body.top_p, seed=body.seed,
                      stop=body.stop, max_tokens=body.max_completion_tokens or body.max_tokens)
    messages = await off_loop(openai_messages, body.messages,
                              MediaSource.of(request.app.state.settings))
    gen_request = with_speculative(chat_request(
        messages, params, json_mode, schema,
        offered=offered_tools(body.tools), tool_choice=openai_tool_choice(body.tool_choice),
        parallel_tool_calls=body.parallel_tool_calls is not False,
        thinking=openai_thinking(body),
        logprobs=top_logprobs(body.logprobs, body.top_logprobs),
        cache_key=body.prompt_cache_key), body.speculative)
    if body.truncate:
        gen_request = replace(gen_request, truncate=True)
    events = await open_events(request.app.state, model, gen_request, "chat",
                               backend=body.backend)
    field = body.reasoning_field or request.app.state.settings.reasoning_field
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    if not body.stream:
        final = await collect(request, events)
        message = openai_wire.message(final, field)
        completion = ChatCompletion(
            id=completion_id, created=created, model=body.model,
            choices=[ChatChoice(message=message,
                                finish_reason=openai_wire.finish_reason(final.stats))],
            usage=openai_wire.usage(final.stats))
        out = completion.model_dump()
        if body.logprobs:
            out["choices"][0]["logprobs"] = {
                "content": openai_wire.chat_logprobs(final.logprobs), "refusal": None}
        out["choices"][0]["message"] = openai_wire.message_json(message)
        return JSONResponse(out)

    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    deltas = openai_wire.Deltas(field)

    pending: list[TokenLogprob] = []  # token logprobs not yet sent, for the next chunk

    def chunk(delta: dict, finish: str | None = None) -> dict:
        logprobs = None
        if pending:
            logprobs = {"content": openai_wire.chat_logprobs(pending), "refusal": None}
            pending.clear()
        return {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                "model": body.model, "system_fingerprint": None,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                             "logprobs": logprobs}]}

    async def sse() -> AsyncIterator[str]:
        yield _sse(chunk({"role": "assistant", "content": ""}))
        async for event in events:
            if isinstance(event, LogprobEvent):
                pending.append(event.entry)  # goes out with the token's text
            elif isinstance(event, DoneEvent):
                # the finish reason in a chunk of its own, with an empty delta
                yield _sse(chunk({}, openai_wire.finish_reason(event.stats)))
                if include_usage:
                    yield _sse({**chunk({}), "choices": [],
                                "usage": openai_wire.usage(event.stats).model_dump()})
            elif isinstance(event, ErrorEvent):
                yield _sse({"error": error_for_event(event).body()})
            else:
                for delta in deltas.of(event):
                    yield _sse(chunk(delta))
        yield _sse("[DONE]")

    return StreamingResponse(with_heartbeats(sse(), SSE_COMMENT), media_type="text/event-stream")


def _float32_le(vector: list[float]) -> bytes:
    packed = array("f", vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


@router.post("/embeddings", response_model=EmbeddingResponse,
             responses={400: {}, 401: {}, 404: {}, 500: {}, 502: {}})
async def embeddings(body: EmbeddingRequest, request: Request) -> EmbeddingResponse:
    model = check_model_name(body.model)
    texts = [body.input] if isinstance(body.input, str) else body.input
    vectors, tokens = await embed(request, model, texts)
    if body.encoding_format == "base64":
        encoded = [base64.b64encode(_float32_le(v)).decode() for v in vectors]
        data = [EmbeddingData(index=i, embedding=e) for i, e in enumerate(encoded)]
    else:
        data = [EmbeddingData(index=i, embedding=v) for i, v in enumerate(vectors)]
    return EmbeddingResponse(
        data=data,
        model=body.model, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens))


@router.post("/completions", response_model=Completion,
             responses={400: {}, 401: {}, 404: {}, 429: {}, 500: {}, 502: {}})
async def completions(body: CompletionRequest,
                      request: Request) -> Completion | StreamingResponse:
    model = check_model_name(body.model)
    prompt = body.prompt if isinstance(body.prompt, str) else "".join(body.prompt)
    params = sampling(temperature=body.temperature, top_p=body.top_p, seed=body.seed,
                      stop=body.stop, max_tokens=body.max_tokens)
    gen_request = with_speculative(completion_request(plain_text(prompt), params,
                                                      logprobs=body.logprobs),
                                   body.speculative)
    events = await open_events(request.app.state, model, gen_request, "completions",
                               backend=body.backend)
    completion_id = f"cmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    if not body.stream:
        final = await collect(request, events)
        return Completion(id=completion_id, created=created, model=body.model,
                          choices=[CompletionChoice(
                              text=final.text, finish_reason=openai_wire.finish_reason(
                                  final.stats),
                              logprobs=None if body.logprobs is None
                              else openai_wire.completion_logprobs(final.logprobs))],
                          usage=openai_wire.usage(final.stats))

    pending: list[TokenLogprob] = []  # token logprobs not yet sent, for the next chunk
    sent = 0  # characters of the answer sent: where the pending tokens' text starts

    def chunk(text: str, finish: str | None = None) -> dict:
        nonlocal sent
        logprobs = None
        if body.logprobs is not None and pending:
            logprobs = openai_wire.completion_logprobs(pending, sent).model_dump()
            sent += sum(len(e.token) for e in pending)
            pending.clear()
        return {"id": completion_id, "object": "text_completion", "created": created,
                "model": body.model,
                "choices": [{"index": 0, "text": text, "finish_reason": finish,
                             "logprobs": logprobs}]}

    async def sse() -> AsyncIterator[str]:
        async for event in events:
            if isinstance(event, LogprobEvent):
                pending.append(event.entry)
            elif isinstance(event, DoneEvent):
                yield _sse(chunk("", openai_wire.finish_reason(event.stats)))
            elif isinstance(event, ErrorEvent):
                yield _sse({"error": error_for_event(event).body()})
            elif isinstance(event, TokenEvent):  # a raw completion's text is all answer
                yield _sse(chunk(event.text))
        yield _sse("[DONE]")

    return StreamingResponse(with_heartbeats(sse(), SSE_COMMENT), media_type="text/event-stream")
