"""Ember's own model routes, for the front ends that join a running service (the window,
`ember run` and `ember chat`, through app.runtime.service_runtime): load a model with every
setting the window has (Ollama's empty-prompt load takes only `num_ctx`), unload it, and list
what is loaded with its worker's pid, so a front end on the same machine shows the worker's
real memory."""

from __future__ import annotations

from typing import Literal

import anyio
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from app.runtime.runtime import LoadedModel
from app.server.bridge import check_model_name
from app.server.model_name import LocalModelName
from backends.errors import InvalidRequestError

router = APIRouter(prefix="/ember", tags=["ember"])


class LoadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: LocalModelName
    context: int | None = Field(None, ge=256, le=1 << 24)  # None: the load plan's
    backend: str | None = Field(None, max_length=32)  # None: the one chosen for the model
    gpu_layers: int | None = Field(None, ge=-1, le=100_000)  # -1: all
    quant: Literal["int8", "int4", "fp8"] | None = None  # the cuda backend's packing at load
    kv_cache: Literal["f16", "q8_0"] | None = None


class UnloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: LocalModelName


class LoadedInfo(BaseModel):
    model: str  # the installed model's ref
    backend: str
    context: int
    threads: int
    gpu_layers: int
    memory_bytes: int  # what the load plan holds
    gpu_memory_bytes: int
    quant: str | None
    kv_cache: str
    reason: str  # the load plan's, in words
    pid: int | None  # the worker process


class LoadedList(BaseModel):
    models: list[LoadedInfo]


class Unloaded(BaseModel):
    model: str
    unloaded: bool  # False: it was not loaded


def info(lm: LoadedModel) -> LoadedInfo:
    p = lm.plan
    return LoadedInfo(model=lm.model.ref, backend=lm.backend, context=p.context,
                      threads=p.threads, gpu_layers=p.gpu_layers, memory_bytes=p.memory_bytes,
                      gpu_memory_bytes=p.gpu_memory_bytes, quant=p.quant, kv_cache=p.kv_cache,
                      reason=p.reason, pid=lm.pid)


def _local(request: Request, name: str) -> str:
    name = check_model_name(name)
    if request.app.state.runtime.is_remote(name):
        raise InvalidRequestError(f"{name} is a remote model: its server loads it", "model")
    return name


@router.get("/loaded", response_model=LoadedList, responses={401: {}})
async def loaded(request: Request) -> LoadedList:
    """The loaded models with their load plans and worker pids (lock-free, as /health)."""
    return LoadedList(models=[info(lm) for lm in request.app.state.runtime.loaded()])


@router.post("/load", response_model=LoadedInfo, responses={400: {}, 401: {}, 404: {}, 500: {}})
async def load(body: LoadRequest, request: Request) -> LoadedInfo:
    """Load a local model as asked (as loaded already, it is answered at once); a model
    loaded otherwise is reloaded once its answers in flight end."""
    runtime = request.app.state.runtime
    model = _local(request, body.model)
    lm = await anyio.to_thread.run_sync(
        lambda: runtime.load(model, body.context, body.backend, body.gpu_layers,
                             quant=body.quant, kv_cache=body.kv_cache))
    return info(lm)


@router.post("/unload", response_model=Unloaded, responses={400: {}, 401: {}, 404: {}})
async def unload(body: UnloadRequest, request: Request) -> Unloaded:
    runtime = request.app.state.runtime
    model = _local(request, body.model)
    gone = await anyio.to_thread.run_sync(runtime.unload, model)
    return Unloaded(model=model, unloaded=gone)
