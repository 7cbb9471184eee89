"""Ember's own status routes: `/health` (version, loaded and loading models) and `/metrics`
(Prometheus text). Both are async and take no lock, so they answer at once while a model
loads (minutes) or the thread pool is taken by requests waiting for one."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from app import __version__

router = APIRouter(tags=["ember"])


@router.get("/health")
async def health(request: Request) -> dict:
    runtime = request.app.state.runtime
    return {"status": "ok", "version": __version__,
            "loaded": [m.model.ref for m in runtime.loaded()],
            "loading": runtime.loading()}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> str:
    state = request.app.state
    admission = state.admission
    return state.metrics.render(admission.queued, admission.active, state.runtime.loaded())
