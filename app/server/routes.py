"""Every route `ember serve` answers, in one table: each API dialect's routers (its package
under app.server holds the routes, schemas, inbound conversion and wire of one API), in the
order the app matches them. The OpenAPI document (`/openapi.json`) is generated from these
routes and their schemas (app.server.app.document_errors adds the error statuses).

To add a route: put it in its dialect's `routes.py` (or a new router there, listed here)."""

from __future__ import annotations

from fastapi import APIRouter

from app.server.anthropic.routes import router as anthropic
from app.server.ember.models import router as ember_models
from app.server.ember.status import router as status
from app.server.ember.tokens import router as tokens
from app.server.ollama.routes import root_router as ollama_root
from app.server.ollama.routes import router as ollama
from app.server.openai.routes import router as openai
from app.server.responses.routes import router as responses

ROUTERS: tuple[APIRouter, ...] = (openai, responses, ollama, tokens, ember_models, ollama_root,
                                  anthropic, status)
