"""Schemathesis hooks for the API fuzzing run (tests/integration/test_openapi_fuzz.py): the
check that stands in for schemathesis's own `positive_data_acceptance`.

A request the OpenAPI document calls valid must not be refused for its form. Some requests
the schema allows are still refused, with a 400 that names a rule JSON Schema does not state
(a tool message without the id of its call, a conversation with no user text, a model that
exists only on a remote server asked to embed...). So a 400 to a schema-valid body passes
only where the route's own request model accepts that body, that is, where the schema and
the validator agree and the refusal came from a rule past both. Every other status outside
what a valid request may get (2xx, 401, 403, 404, 409, 429; 5xx is `not_a_server_error`'s)
fails, as in schemathesis's own check.
"""

from __future__ import annotations

import inspect
import os
from functools import cache
from typing import Any

import schemathesis
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from schemathesis.core import NotSet

from app.server.anthropic import schemas as anthropic_schemas
from app.server.ember import tokens
from app.server.ollama import schemas as ollama_schemas
from app.server.openai import schemas
from app.server.responses import schemas as responses_schemas

VALID_REQUEST_STATUSES = {401, 403, 404, 409, 429}
# Routes that run a model: two in three of their cases name the real one (EMBER_FUZZ_MODEL), so
# fuzzing reaches the templates, the tokenizer and the engine instead of only the 404 of a
# model that is not there. Those cases ask for at most REAL_MODEL_TOKENS tokens (generation
# time bounds the run, not what is tested). Deleting and pulling keep the fuzzer's names.
REAL_MODEL_PATHS = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                    "/v1/messages/count_tokens", "/v1/embeddings", "/api/chat", "/api/generate",
                    "/api/embed", "/api/embeddings", "/api/show", "/tokenize", "/detokenize"}
REAL_MODEL_TOKENS = 8
QUESTION = "Say hi."


@cache
def request_models() -> dict[str, type[BaseModel]]:
    """Every pydantic model the routes read, by the name the OpenAPI document gives it."""
    found: dict[str, type[BaseModel]] = {}
    for module in (schemas, ollama_schemas, anthropic_schemas, responses_schemas, tokens):
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj is not BaseModel:
                found.setdefault(name, obj)
    return found


def body_model(case: schemathesis.Case) -> type[BaseModel] | None:
    body = case.operation.definition.raw.get("requestBody", {})
    ref = body.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
    return request_models().get(ref.rsplit("/", 1)[-1]) if ref else None


@schemathesis.check
def schema_valid_requests_pass_their_model(ctx: schemathesis.CheckContext,
                                           response: schemathesis.Response,
                                           case: schemathesis.Case) -> bool | None:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    status = response.status_code
    if status < 400 or status >= 500 or status in VALID_REQUEST_STATUSES:
        return None
    if status == 400:
        model = body_model(case)
        if model is not None and not isinstance(case.body, NotSet):
            try:
                model.model_validate(case.body)
            except ValidationError as e:
                raise AssertionError(
                    f"the schema allows this body, but {model.__name__} refuses it: "
                    f"{e.errors()[0]['msg']} at {e.errors()[0]['loc']}") from None
            return None
    raise AssertionError(f"a schema-valid request got {status}: {response.text[:300]}")


TOKEN_LIMITS = {"/v1/chat/completions": ("max_tokens", "max_completion_tokens"),
                "/v1/completions": ("max_tokens",), "/v1/messages": ("max_tokens",),
                "/v1/responses": ("max_output_tokens",)}


def with_real_model(path: str, body: dict[str, Any], model: str) -> dict[str, Any]:
    """`body` of a request to `path` naming `model`, its answer bounded to REAL_MODEL_TOKENS
    tokens (a schema-valid bound on each route)."""
    body = {**body, "model": model}
    for key in TOKEN_LIMITS.get(path, ()):
        value = body.get(key)
        body[key] = min(value, REAL_MODEL_TOKENS) if isinstance(value, int) and value > 0 \
            else REAL_MODEL_TOKENS
    if path in ("/api/chat", "/api/generate"):
        options = body.get("options") if isinstance(body.get("options"), dict) else {}
        body["options"] = {**options, "num_predict": REAL_MODEL_TOKENS}
    # a question with words, so that generated turns that hold none still reach the engine
    if isinstance(body.get("messages"), list) and len(body["messages"]) < 1000:
        body["messages"] = [*body["messages"], {"role": "user", "content": QUESTION}]
    for key in ("prompt", "input"):
        if isinstance(body.get(key), str) and not body[key].strip():
            body[key] = QUESTION
    return body


@schemathesis.hook
def flatmap_body(context: schemathesis.HookContext, body: Any) -> st.SearchStrategy:
    model = os.environ.get("EMBER_FUZZ_MODEL")
    operation = context.operation
    if (not model or operation is None or operation.path not in REAL_MODEL_PATHS
            or not isinstance(body, dict) or not isinstance(body.get("model"), str)):
        return st.just(body)
    real = with_real_model(operation.path, body, model)
    return st.sampled_from([real, real, body])  # two in three name the real model


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: schemathesis.Case,
                kwargs: dict[str, Any]) -> None:
    """The stateful phase deletes the names /api/tags lists: it may delete any installed
    model but the one the other cases run (that one's delete is asked of a copy's name)."""
    model = os.environ.get("EMBER_FUZZ_MODEL")
    if (model and case.operation.path == "/api/delete" and isinstance(case.body, dict)
            and any(isinstance(v, str) and v.partition(":")[0] == model
                    for v in (case.body.get("model"), case.body.get("name")))):
        case.body = {**case.body, **{k: f"{model}-copy" for k in ("model", "name")
                                     if isinstance(case.body.get(k), str)}}
