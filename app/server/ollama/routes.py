"""Ollama-compatible routes: /api/version, tags, show, chat, generate, ps, pull, delete."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

from app import __version__
from app.pull.hf_pull import is_hub_name, parse_hub_name
from app.pull.install import pull as download
from app.pull.progress import Progress
from app.registry import load_registry
from app.runtime.memory_pools import devices_of
from app.runtime.model_traits import model_traits
from app.runtime.remote_streams import RemoteModel
from app.server.bridge import (
    check_model_name,
    collect,
    embed,
    open_events,
    parse_keep_alive,
)
from app.server.errors import ApiError
from app.server.generation_request import (
    chat_request,
    completion_request,
    offered_tools,
    plain_messages,
    sampling,
    top_logprobs,
    with_speculative,
)
from app.server.media_inbound import MediaSource, off_loop, with_markers
from app.server.ollama import wire as ollama_wire
from app.server.ollama.inbound import ollama_images, ollama_messages, ollama_thinking
from app.server.ollama.schemas import (
    OllamaBase,
    OllamaChatRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaLegacyEmbeddingRequest,
    OllamaModelRequest,
    OllamaPullRequest,
)
from app.server.openai import wire as openai_wire
from app.store import InstalledModel
from backends.base import (
    DoneEvent,
    ErrorEvent,
    GenerationRequest,
    LogprobEvent,
    Message,
    SamplingParams,
    Stats,
    TokenLogprob,
)
from backends.errors import EmberError

router = APIRouter(prefix="/api", tags=["ollama"])
root_router = APIRouter(tags=["ollama"])  # `/`, outside /api


@root_router.get("/", response_class=PlainTextResponse, operation_id="root_get")
@root_router.head("/", response_class=PlainTextResponse, operation_id="root_head")
def root() -> str:
    """What Ollama answers here: clients probe it to find a running server."""
    return "Ollama is running"


STREAMED: dict[int | str, dict] = {200: {
    "description": "The whole answer (application/json), or with `stream` (the default) its "
                   "chunks, a line of JSON each (application/x-ndjson)",
    "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}}


def errors(*statuses: int) -> dict[int | str, dict]:
    """The error statuses a route documents (app.server.app.document_errors adds 401, 413 and
    Ollama's error body)."""
    return {status: {} for status in statuses}
NS = 1_000_000_000


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _name(raw: str) -> str:
    """Ollama clients send `model:latest` for an untagged model."""
    return check_model_name(raw.removesuffix(":latest"))


def _details(m: InstalledModel) -> dict:
    return {"format": m.format, "family": m.architecture, "families": [m.architecture],
            "parameter_size": "", "quantization_level": m.quant, "parent_model": ""}


def _tag(m: InstalledModel) -> dict:
    return {"name": m.ref, "model": m.ref, "size": m.size_bytes, "digest": m.sha256,
            "modified_at": datetime.fromtimestamp(m.installed_at, UTC).isoformat(),
            "details": _details(m)}


@router.get("/version")
def version() -> dict:
    return {"version": __version__}


def _remote_tag(m: RemoteModel) -> dict:
    return {"name": m.ref, "model": m.ref, "size": 0, "digest": "",
            "modified_at": datetime.fromtimestamp(m.created, UTC).isoformat(),
            "details": {"format": "remote", "family": "", "families": [],
                        "parameter_size": "", "quantization_level": "",
                        "parent_model": m.endpoint}}


@router.get("/tags")
def tags(request: Request) -> dict:
    runtime = request.app.state.runtime
    remote, _ = runtime.remote_models()  # an unreachable endpoint is left out
    return {"models": [_tag(m) for m in runtime.list_models()]
            + [_remote_tag(m) for m in remote]}


@router.post("/show", responses=errors(400, 404))
def show(body: OllamaModelRequest, request: Request) -> dict:
    runtime = request.app.state.runtime
    name = _name(body.ref)
    if runtime.is_remote(name):  # its server keeps the template and the weights
        runtime.check_model(name)
        return {"modelfile": "", "parameters": "", "template": "", "model_info": {},
                "details": {"format": "remote", "family": "", "families": [],
                            "parameter_size": "", "quantization_level": "",
                            "parent_model": name.partition("/")[0]},
                "capabilities": ["completion", "chat"]}
    model = runtime.store.get(name)
    traits = model_traits(model)
    return {"modelfile": f"FROM {model.path}\n", "parameters": "",
            "template": traits.template or "", "details": _details(model),
            "model_info": traits.metadata, "capabilities": traits.capabilities}


@router.get("/ps")
def ps(request: Request) -> dict:
    """Ollama's fields (`size`: the memory the load plan holds; `size_vram`: of it, on the
    GPU), and Ember's own: the backend, llama.cpp's GPU layers and each GPU the model runs on,
    with its vendor, memory and the llama.cpp backend that drives it."""
    runtime = request.app.state.runtime
    return {"models": [
        {**_tag(lm.model), "expires_at": None, "size": lm.plan.memory_bytes,
         "size_vram": lm.plan.gpu_memory_bytes, "context_length": lm.plan.context,
         "backend": lm.backend, "gpu_layers": lm.plan.gpu_layers,
         "gpus": [{"name": g.name, "vendor": g.vendor, "memory_total": g.vram_total,
                   "backend": g.llama_backend if lm.backend == "llamacpp" else lm.backend}
                  for g in devices_of(runtime.hardware, lm.plan, lm.backend)]}
        for lm in runtime.loaded()]}


@router.delete("/delete", responses=errors(400, 404))
def delete(body: OllamaModelRequest, request: Request) -> dict:
    runtime = request.app.state.runtime
    name = _name(body.ref)
    runtime.store.get(name)
    runtime.unload(name)
    runtime.store.remove(name)
    return {}


@router.post("/pull", response_model=None, responses=STREAMED | errors(400, 404, 500))
async def pull(body: OllamaPullRequest, request: Request) -> StreamingResponse | dict:
    """Ollama's pull from Ember's registry, or of any Hub repo (hf.co/OWNER/REPO[:QUANT], as
    Ollama names them); a name the registry lacks is a 404 before any stream starts, a failure
    while downloading (a Hub repo or quantization that is not there too) is the stream's last
    line (as Ollama's)."""
    name = _name(body.ref)
    if is_hub_name(name):
        try:
            parse_hub_name(name)
        except EmberError as e:  # a malformed one is a 400 now
            raise ApiError(400, str(e)) from e
    else:
        load_registry().get(name.partition(":")[0])
    store = request.app.state.runtime.store
    send, receive = anyio.create_memory_object_stream[dict](max_buffer_size=1024)
    cancel = threading.Event()

    def on_progress(p: Progress) -> None:
        status = {"download": f"pulling {p.model}", "verify": "verifying sha256 digest",
                  "install": "writing manifest", "done": "success"}[p.phase]
        event: dict[str, str | int] = {"status": status}
        if p.phase in ("download", "verify"):
            event |= {"digest": p.model, "total": p.total_bytes, "completed": p.done_bytes}
        if p.message and p.phase != "done":
            event["message"] = p.message
        anyio.from_thread.run(send.send, event)

    async def run() -> None:
        async with send:
            try:
                await anyio.to_thread.run_sync(lambda: download(name, store, on_progress,
                                                                cancel))
            except EmberError as e:
                await send.send({"error": str(e)})

    async def ndjson() -> AsyncIterator[str]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            try:
                async with receive:
                    async for event in receive:
                        yield json.dumps(event) + "\n"
            finally:
                cancel.set()  # a client that leaves stops the download (it can be resumed)

    if body.stream:
        return StreamingResponse(ndjson(), media_type="application/x-ndjson")
    last: dict = {}
    async for line in ndjson():
        last = json.loads(line)
    if "error" in last:
        raise ApiError(500, last["error"])
    return last


def _params(body: OllamaBase) -> SamplingParams:
    o = body.options
    if o is None:
        return sampling()
    max_tokens = None if o.num_predict is None or o.num_predict < 0 else max(o.num_predict, 1)
    return sampling(temperature=o.temperature, top_p=o.top_p, top_k=o.top_k,
                    min_p=o.min_p, repeat_penalty=o.repeat_penalty, seed=o.seed,
                    stop=o.stop, max_tokens=max_tokens)


def _format(body: OllamaBase) -> tuple[bool, dict | None]:
    if body.format is None or body.format == "":
        return False, None
    if body.format == "json":
        return True, None
    if isinstance(body.format, dict):
        return True, body.format
    raise ApiError(400, f"invalid format {body.format!r}: use \"json\" or a JSON schema")


def _final(model: str, stats: Stats, started: float, field: str) -> dict:
    total = time.monotonic() - started
    body = {"model": model, "created_at": _now(), "done": True,
            "done_reason": ollama_wire.done_reason(stats.finish_reason),
            "total_duration": int(total * NS), "load_duration": 0,
            "prompt_eval_count": stats.prompt_tokens,
            "prompt_eval_duration": int(stats.ttft_s * NS),
            "eval_count": stats.completion_tokens,
            "eval_duration": int(max(total - stats.ttft_s, 0) * NS)}
    return body | ({"message": {"role": "assistant", "content": ""}} if field == "message"
                   else {"response": ""})


async def _respond(request: Request, body: OllamaBase, model: str,
                   gen_request: GenerationRequest, field: str) -> StreamingResponse | dict:
    state = request.app.state
    keep_alive = parse_keep_alive(body.keep_alive)
    backend = body.options.backend if body.options else None
    num_ctx = body.options.num_ctx if body.options else None
    gen_request = replace(gen_request, logprobs=top_logprobs(body.logprobs, body.top_logprobs))
    endpoint = "api_chat" if field == "message" else "api_generate"  # the metrics' label
    events = await open_events(state, model, gen_request, endpoint, keep_alive, backend,
                               context=num_ctx)
    started = time.monotonic()

    pending: list[TokenLogprob] = []  # token logprobs not yet sent, for the next line

    def line(part: dict) -> str:
        """One NDJSON line of the answer: /api/chat's message part, or /api/generate's
        `response` (and `thinking`) at the top level; with the log-probabilities of the
        tokens since the last line, if the request asked for them."""
        content: dict[str, object]
        if field == "message":
            content = {"message": {"role": "assistant", **part}}
        else:
            content = {"response": part.get("content", "")} | (
                {"thinking": part["thinking"]} if "thinking" in part else {})
        if pending:
            content["logprobs"] = openai_wire.chat_logprobs(pending)
            pending.clear()
        return json.dumps({"model": body.model, "created_at": _now(), **content,
                           "done": False}) + "\n"

    if not body.stream:
        final = await collect(request, events)
        out = _final(body.model, final.stats, started, field)
        if body.logprobs:
            out["logprobs"] = openai_wire.chat_logprobs(final.logprobs)
        message = ollama_wire.message(final)
        if field == "message":
            out["message"] = message
        else:
            out["response"] = final.text
            if final.reasoning:
                out["thinking"] = final.reasoning
        return out

    async def ndjson() -> AsyncIterator[str]:
        pieces = ollama_wire.Pieces()
        async for event in events:
            if isinstance(event, LogprobEvent):
                pending.append(event.entry)  # goes out with the token's text
            elif isinstance(event, DoneEvent):
                for part in pieces.end(event):
                    yield line(part)
                final = _final(body.model, event.stats, started, field)
                if pending:  # tokens whose text was held back or hidden (a stop string)
                    final["logprobs"] = openai_wire.chat_logprobs(pending)
                yield json.dumps(final) + "\n"
            elif isinstance(event, ErrorEvent):
                yield json.dumps({"error": event.message}) + "\n"
            else:
                for part in pieces.of(event):
                    yield line(part)

    return StreamingResponse(ndjson(), media_type="application/x-ndjson")


@router.post("/embed", responses=errors(400, 404, 500))
async def embed_route(body: OllamaEmbedRequest, request: Request) -> dict:
    model = _name(body.model)
    texts = [body.input] if isinstance(body.input, str) else body.input
    started = time.monotonic()
    vectors, tokens = await embed(request, model, texts)
    return {"model": body.model, "embeddings": vectors, "prompt_eval_count": tokens,
            "total_duration": int((time.monotonic() - started) * NS), "load_duration": 0}


@router.post("/embeddings", responses=errors(400, 404, 500))
async def embeddings_legacy(body: OllamaLegacyEmbeddingRequest, request: Request) -> dict:
    vectors, _ = await embed(request, _name(body.model), [body.prompt])
    return {"embedding": vectors[0]}


@router.post("/chat", response_model=None,
             responses=STREAMED | errors(400, 404, 429, 500, 502))
async def chat(body: OllamaChatRequest, request: Request) -> StreamingResponse | dict:
    model = _name(body.model)
    if not body.messages:  # Ollama: an empty chat loads (or with keep_alive 0 unloads)
        return await _load_or_unload(request, body, model, "message")
    json_mode, schema = _format(body)
    messages = await off_loop(ollama_messages, body.messages,
                              MediaSource.of(request.app.state.settings))
    gen_request = with_speculative(chat_request(
        messages, _params(body), json_mode, schema,
        offered=offered_tools(body.tools), thinking=ollama_thinking(body.think)),
        body.speculative)
    return await _respond(request, body, model, gen_request, "message")


@router.post("/generate", response_model=None,
             responses=STREAMED | errors(400, 404, 429, 500, 502))
async def generate(body: OllamaGenerateRequest, request: Request) -> StreamingResponse | dict:
    model = _name(body.model)
    if not body.prompt:
        return await _load_or_unload(request, body, model, "response")
    json_mode, schema = _format(body)
    runtime = request.app.state.runtime
    # a remote server applies its own chat template; raw goes to its /completions
    chat = runtime.is_remote(model) or runtime.store.get(model).chat
    images = await off_loop(ollama_images, body.images, "images",
                            MediaSource.of(request.app.state.settings))
    prompt = with_markers(body.prompt, images)  # the images first, as Ollama's generate has
    if body.raw or not chat:
        gen_request = completion_request(prompt, _params(body), json_mode, schema,
                                         media=tuple(images))
    else:
        system = plain_messages(("system", body.system)) if body.system else ()
        gen_request = chat_request((*system, Message("user", prompt, media=tuple(images))),
                                   _params(body), json_mode, schema,
                                   thinking=ollama_thinking(body.think))
    gen_request = with_speculative(gen_request, body.speculative)
    return await _respond(request, body, model, gen_request, "response")


async def _load_or_unload(request: Request, body: OllamaBase, model: str, field: str) -> dict:
    runtime = request.app.state.runtime
    await anyio.to_thread.run_sync(runtime.check_model, model)
    keep_alive = parse_keep_alive(body.keep_alive)
    if runtime.is_remote(model):
        reason = "load"  # its server decides what it keeps loaded
    elif keep_alive == 0:
        await anyio.to_thread.run_sync(runtime.unload, model)
        reason = "unload"
    else:  # with the context the request asks for, as Ollama loads it (options.num_ctx)
        num_ctx = body.options.num_ctx if body.options else None
        await anyio.to_thread.run_sync(runtime.load, model, num_ctx)
        if keep_alive is not None:
            runtime.keep_alive(model, keep_alive)
        reason = "load"
    content = {"message": {"role": "assistant", "content": ""}} if field == "message" \
        else {"response": ""}
    return {"model": body.model, "created_at": _now(), **content, "done": True,
            "done_reason": reason}
