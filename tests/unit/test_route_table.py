"""`app/server/routes.py` is the one table of the server's routes: every router defined under
app/server is in it, and the app's OpenAPI document lists exactly the table's routes."""

from __future__ import annotations

import importlib
import pkgutil
import re

from fastapi import APIRouter
from fastapi.routing import APIRoute

import app.server
from app.server.app import create_app
from app.server.routes import ROUTERS
from tests.support.fake_runtime import ScriptedRuntime


def _server_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(app.server.__path__, "app.server.")]


def test_every_router_under_app_server_is_in_the_table() -> None:
    found = {}
    for name in _server_modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, APIRouter):
                found[id(value)] = f"{name}.{attr}"
    missing = [where for key, where in found.items() if key not in {id(r) for r in ROUTERS}]
    assert found and not missing, f"routers not listed in app/server/routes.py: {missing}"


def test_the_app_routes_are_the_tables() -> None:
    table = {(r.path, tuple(sorted(r.methods))) for router in ROUTERS for r in router.routes
             if isinstance(r, APIRoute)}
    # the document writes a path parameter without its converter ({model:path} as {model})
    table = {(re.sub(r"\{(\w+):\w+\}", r"{\1}", path), method) for path, methods in table
             for method in methods}
    document = create_app(ScriptedRuntime()).openapi()  # what the app serves, documented
    served = {(path, method.upper()) for path, operations in document["paths"].items()
              for method in operations}
    assert served == table
    paths = {path for path, _ in served}
    for expected in ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/api/chat",
                     "/api/pull", "/tokenize", "/health", "/metrics", "/"):
        assert expected in paths
