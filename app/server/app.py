"""The FastAPI application: routes, safety (auth, body limit, CORS), errors, idle unloading."""

from __future__ import annotations

import contextlib
import hmac
import json
import re
from collections.abc import AsyncIterator

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__
from app.errors import ModelBusyError, ModelNotFoundError
from app.runtime import Runtime
from app.server import server_tools
from app.server.access_log import AccessLog
from app.server.anthropic.schemas import AnthropicErrorResponse
from app.server.bridge import Admission, ClientGoneError, ServerBusyError
from app.server.errors import ApiError, error_body, is_anthropic_path
from app.server.metrics import Metrics
from app.server.ollama.schemas import OllamaError
from app.server.openai.schemas import ErrorResponse
from app.server.responses.store import ResponseStore
from app.server.routes import ROUTERS
from app.server.server_tools import McpAskReader
from app.server.settings import ServerSettings
from app.server.web_walls import WebWalls, is_loopback_name, origin_pattern
from backends.errors import EmberError, InvalidRequestError, RemoteError

IDLE_SWEEP_S = 5.0


def check_bind(settings: ServerSettings) -> None:
    """Safe by default: anything but loopback needs a key, or an explicit opt-out."""
    if not (is_loopback_name(settings.host) or settings.api_key or settings.insecure_no_auth):
        raise EmberError(f"refusing to listen on {settings.host} without an API key: anyone "
                         "who can reach this machine could use it. Pass --api-key KEY (clients "
                         "send 'Authorization: Bearer KEY'), or --insecure-no-auth if you "
                         "really mean it")


class Guard:
    """Pure ASGI, before any route runs: refuses foreign Hosts and Origins and non-JSON bodies
    (app.server.web_walls), checks the API key and bounds request bodies."""

    def __init__(self, app: ASGIApp, settings: ServerSettings) -> None:
        self.app, self.settings = app, settings
        self.walls = WebWalls.for_server(settings.host, settings.cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        client = scope.get("client")
        refusal = self.walls.check(scope["method"], headers, client[0] if client else None)
        if refusal is not None:
            return await _send_error(scope, send, ApiError(refusal.status, refusal.message,
                                                           code=refusal.code))
        key = self.settings.api_key
        if key and path not in self.settings.open_paths and scope["method"] != "OPTIONS":
            given = headers.get("authorization", "").removeprefix("Bearer ").strip()
            given = given or headers.get("x-api-key", "")
            if not hmac.compare_digest(given.encode(), key.encode()):
                return await _send_error(scope, send, ApiError(
                    401, "missing or wrong API key: send 'Authorization: Bearer KEY' (or "
                    "'x-api-key: KEY')",
                    code="invalid_api_key"))
        limit = self.settings.max_body_bytes
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return await _send_error(scope, send, ApiError(
                413, f"request body over {limit} bytes", code="request_too_large"))
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise ApiError(413, f"request body over {limit} bytes",
                                   code="request_too_large")
            return message

        return await self.app(scope, bounded, send)


async def _send_error(scope: Scope, send: Send, err: ApiError) -> None:
    response = JSONResponse(error_body(scope["path"], err), status_code=err.status,
                            headers=err.headers)
    await response(scope, _no_receive, send)


async def _no_receive() -> dict:
    return {"type": "http.disconnect"}


def _error_response(request: Request, err: ApiError) -> JSONResponse:
    return JSONResponse(error_body(request.url.path, err), status_code=err.status,
                        headers=err.headers)


def wire_path(loc: tuple | list, body: object, missing: bool = False) -> str | None:
    """A validation error's place as a path into the request (`messages[2].tool_calls[0].id`).
    pydantic's `loc` also names the union member it tried (`str`, `list[ContentPart]`...):
    only the keys and indexes the body really has are kept, and a missing field's name."""
    parts: list[str] = []
    node = body
    for i, key in enumerate(loc):
        if isinstance(key, int) and isinstance(node, list) and 0 <= key < len(node):
            parts.append(f"[{key}]")
            node = node[key]
        elif isinstance(key, str) and isinstance(node, dict) and key in node:
            parts.append(f".{key}")
            node = node[key]
        elif missing and i == len(loc) - 1:
            parts.append(f".{key}")
    return "".join(parts).lstrip(".") or None


ERROR_MODELS: dict[str, type[BaseModel]] = {
    "openai": ErrorResponse, "ollama": OllamaError, "anthropic": AnthropicErrorResponse}
ERROR_STATUSES = {400: "The request is malformed: the message names the field",
                  401: "Missing or wrong API key (when the server has one)",
                  403: "The Host or Origin is not one this server answers (a web page's)",
                  404: "No such model, or no such stored item",
                  413: "The request body is too large",
                  409: "The model answers others as loaded; a reload would end them",
                  415: "The body is not sent as JSON (Content-Type: application/json)",
                  429: "Too many requests queued: retry after the Retry-After header's seconds",
                  500: "The model failed, or its worker crashed",
                  502: "A remote model's server failed"}


def api_shape(path: str) -> str:
    """Which API's error shape a path answers in (app.server.errors.error_body)."""
    if path.startswith("/api/"):
        return "ollama"
    return "anthropic" if is_anthropic_path(path) else "openai"


def document_errors(app: FastAPI, open_paths: tuple[str, ...]) -> None:
    """The OpenAPI document states the statuses the server really answers, in the shapes it
    answers them: FastAPI documents a 422 for every body it validates, which this app answers
    with a 400 in the route's API shape (`invalid` below), so the 422s (and the schemas only
    they used) leave; every route behind the key may answer 401 and every body 413 (the
    Guard); and each error status a route lists gets its API's error body."""
    make = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            doc = make()
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for unused in ("HTTPValidationError", "ValidationError"):
                schemas.pop(unused, None)
            for model in ERROR_MODELS.values():
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(schema.pop("$defs", {}))
                schemas.setdefault(model.__name__, schema)
            for path, operations in doc.get("paths", {}).items():
                ref = {"$ref": f"#/components/schemas/{ERROR_MODELS[api_shape(path)].__name__}"}
                for operation in operations.values():
                    responses = operation.setdefault("responses", {})
                    responses.pop("422", None)
                    if path not in open_paths:
                        responses.setdefault("401", {})
                    responses.setdefault("403", {})
                    if "requestBody" in operation:
                        responses.setdefault("413", {})
                        responses.setdefault("415", {})
                    for status, response in responses.items():
                        if int(status) >= 400:
                            response.setdefault("description", ERROR_STATUSES[int(status)])
                            response.setdefault("content",
                                                {"application/json": {"schema": ref}})
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def route_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the OpenAPI document gives `path`, sorted."""
    methods: set[str] = set()
    for template, operations in app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^}]*\\\}", ".+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods |= {m.upper() for m in operations}
    return sorted(methods)


def create_app(runtime: Runtime, settings: ServerSettings | None = None) -> FastAPI:
    settings = settings or ServerSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            async def sweep() -> None:
                while True:
                    await anyio.sleep(IDLE_SWEEP_S)
                    await anyio.to_thread.run_sync(runtime.unload_idle)

            tg.start_soon(sweep)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
        if app.state.server_tools is not None:
            await anyio.to_thread.run_sync(app.state.server_tools.close)
        if settings.owns_runtime:
            await anyio.to_thread.run_sync(runtime.shutdown)

    app = FastAPI(title="Ember", version=__version__, lifespan=lifespan,
                  description="OpenAI-, Ollama- and Anthropic-compatible API of Ember, a local "
                              "LLM app.")
    app.state.runtime = runtime
    app.state.settings = settings
    app.state.metrics = Metrics()
    app.state.admission = Admission(capacity=settings.parallel, queue_limit=settings.queue_limit)
    app.state.responses = ResponseStore()  # for the Responses API's previous_response_id
    app.state.server_tools = server_tools.start(settings.mcp, settings.mcp_home,
                                                settings.mcp_allow)
    if runtime.idle_ttl_s is None:
        runtime.idle_ttl_s = settings.idle_ttl_s
    runtime.parallel = settings.parallel
    for router in ROUTERS:
        app.include_router(router)
    document_errors(app, settings.open_paths)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        return _error_response(request, err)

    @app.exception_handler(StarletteHTTPException)
    async def no_route(request: Request, err: StarletteHTTPException) -> JSONResponse:
        """An unknown path or method, in the API's error shape; a 405's Allow names every
        method the path has (Starlette's names only the first route that matched it)."""
        path, method = request.url.path, request.method
        headers = dict(err.headers or {})
        if err.status_code == 405:
            allowed = route_methods(app, path)
            headers["Allow"] = ", ".join(allowed)
            message = f"{method} is not allowed on {path[:200]}: it takes {', '.join(allowed)}"
        elif err.status_code == 404:
            message = f"no route {method} {path[:200]} (this server's API is at /docs)"
        else:
            message = str(err.detail)
        return _error_response(request, ApiError(err.status_code, message, headers=headers))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        where = wire_path(first.get("loc", ())[1:], err.body,
                          missing=first.get("type") == "missing")
        if first.get("type") == "json_invalid":
            message = "request body is not valid JSON"
        else:
            message = f"{where or 'body'}: {first.get('msg', 'invalid request')}"
        return _error_response(request, ApiError(400, message, param=where))

    @app.exception_handler(ModelNotFoundError)
    async def not_found(request: Request, err: ModelNotFoundError) -> JSONResponse:
        return _error_response(request, ApiError(404, str(err), code="model_not_found"))

    @app.exception_handler(InvalidRequestError)
    async def bad_request(request: Request, err: InvalidRequestError) -> JSONResponse:
        return _error_response(request, ApiError(400, str(err), param=err.param))

    @app.exception_handler(ServerBusyError)
    async def busy(request: Request, err: ServerBusyError) -> JSONResponse:
        return _error_response(request, ApiError(
            429, str(err), code="server_busy", headers={"Retry-After": str(err.retry_after_s)}))

    @app.exception_handler(ModelBusyError)
    async def model_busy(request: Request, err: ModelBusyError) -> JSONResponse:
        return _error_response(request, ApiError(409, str(err), code="model_busy"))

    @app.exception_handler(ClientGoneError)
    async def client_gone(request: Request, err: ClientGoneError) -> JSONResponse:
        # nobody reads it: the access log's status (nginx's 499) says the client left
        return _error_response(request, ApiError(499, "the client closed the request",
                                                 code="client_closed_request"))

    @app.exception_handler(RemoteError)
    async def remote_error(request: Request, err: RemoteError) -> JSONResponse:
        # the remote server (not this one, nor the client's request) failed: a bad gateway
        return _error_response(request, ApiError(502, str(err), code="remote_error"))

    @app.exception_handler(EmberError)
    async def ember_error(request: Request, err: EmberError) -> JSONResponse:
        return _error_response(request, ApiError(500, str(err)))

    @app.exception_handler(json.JSONDecodeError)
    async def bad_json(request: Request, err: json.JSONDecodeError) -> JSONResponse:
        return _error_response(request, ApiError(400, "request body is not valid JSON"))

    app.add_middleware(McpAskReader, enabled=settings.mcp)  # inside the Guard: after auth
    # loopback pages and the listed origins get CORS answers; the Guard refuses the rest
    app.add_middleware(CORSMiddleware,
                       allow_origin_regex=origin_pattern(settings.cors_origins).pattern,
                       allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(Guard, settings=settings)
    app.add_middleware(AccessLog)  # the last added runs first: it sees the Guard's refusals
    return app
