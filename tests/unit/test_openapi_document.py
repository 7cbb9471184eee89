"""The OpenAPI document says what the server answers (the fuzzing run in
tests/integration/test_openapi_fuzz.py checks it against a real model; these are the rules it
rests on, checked fast): statuses with their API's error body, one pattern for model names
that the schema states and the routes enforce, and 404/405 in the route's API shape."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.server.model_name import LOCAL_PATTERN, PATTERN, name_problem
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served


@pytest.fixture(scope="module")
def document() -> dict:
    with served(ScriptedRuntime()) as client:
        return client.get("/openapi.json").json()


def operations(document: dict):
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def test_no_route_documents_a_422_and_every_error_has_its_apis_body(document):
    shapes = {"/api/": "OllamaError", "/v1/messages": "AnthropicErrorResponse"}
    for path, method, operation in operations(document):
        responses = operation["responses"]
        assert "422" not in responses, (method, path)
        want = next((s for prefix, s in shapes.items() if path.startswith(prefix)),
                    "ErrorResponse")
        for status, response in responses.items():
            if int(status) >= 400:
                ref = response["content"]["application/json"]["schema"]["$ref"]
                assert ref == f"#/components/schemas/{want}", (method, path, status)
                assert response["description"], (method, path, status)
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_every_route_behind_the_key_documents_401_and_every_body_413(document):
    for path, method, operation in operations(document):
        assert ("401" in operation["responses"]) == (path != "/health"), (method, path)
        if "requestBody" in operation:
            assert {"400", "413"} <= set(operation["responses"]), (method, path)


def test_streaming_routes_document_their_stream_content_type(document):
    ndjson = document["paths"]["/api/chat"]["post"]["responses"]["200"]["content"]
    assert "application/x-ndjson" in ndjson
    sse = document["paths"]["/v1/messages"]["post"]["responses"]["200"]["content"]
    # each event as its fields (event, data, id, retry), the way OpenAPI 3.2 and the fuzzer
    # read an event stream: a whole-body string schema fails every event it is checked on
    event = sse["text/event-stream"]["schema"]
    assert event["type"] == "object" and event["required"] == ["data"]
    assert event["properties"]["data"]["contentMediaType"] == "application/json"


def test_every_model_field_carries_the_pattern_the_routes_enforce(document):
    schemas = document["components"]["schemas"]
    for name in ("ChatCompletionRequest", "CompletionRequest", "MessagesRequest",
                 "ResponseCreateRequest", "OllamaChatRequest", "OllamaGenerateRequest"):
        assert schemas[name]["properties"]["model"]["pattern"] == PATTERN, name
    for name in ("EmbeddingRequest", "OllamaEmbedRequest"):
        assert schemas[name]["properties"]["model"]["pattern"] == LOCAL_PATTERN, name
    model = document["paths"]["/v1/models/{model}"]["get"]["parameters"][0]
    assert model["schema"]["pattern"] == PATTERN


@pytest.mark.parametrize("name", [
    "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct:Q4_K_M", "gemma-3-270m:latest",
    "gpu/meta-llama/Llama-3.1-8B-Instruct", "lab/org/model:tag@v1.2", "a"])
def test_real_names_are_model_names(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("name", [
    "", "a..b", "../etc/passwd", "gpu/../x", "x/y/../../z", ".hidden", "a b", "q:", "a:b:c",
    "Gpu/model", "x" * 201, "qwen:Q4..K"])
def test_paths_and_garbage_are_not(name):
    problem = name_problem(name)
    assert problem is not None and "invalid model name" in problem


@given(st.from_regex(PATTERN, fullmatch=True))
def test_every_name_the_schema_allows_passes_the_check(name):
    if len(name) <= 200:
        assert name_problem(name) is None
        assert ".." not in name


@given(st.text(alphabet="ab./:-_Z9", max_size=40))
def test_the_check_is_the_pattern(name):
    assert (name_problem(name) is None) == bool(re.fullmatch(PATTERN, name))


def test_a_schema_invalid_name_is_a_400_naming_the_field_in_each_apis_shape():
    with served(ScriptedRuntime()) as client:
        chat = client.post("/v1/chat/completions", json={
            "model": "a..b", "messages": [{"role": "user", "content": "hi"}]})
        ollama = client.post("/api/chat", json={"model": "", "messages": []})
        anthropic = client.post("/v1/messages", json={
            "model": "x y", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
        embed = client.post("/v1/embeddings", json={"model": "lab/model", "input": "hi"})
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "model"
    assert "invalid model name 'a..b'" in chat.json()["error"]["message"]
    assert ollama.status_code == 400 and "invalid model name ''" in ollama.json()["error"]
    assert anthropic.status_code == 400
    assert anthropic.json()["error"]["type"] == "invalid_request_error"
    assert embed.status_code == 400
    assert "lab/model is a remote model" in embed.json()["error"]["message"]


def test_ollamas_model_requests_need_a_model_or_a_name():
    with served(ScriptedRuntime()) as client:
        neither = client.post("/api/show", json={})
        old_style = client.post("/api/show", json={"name": "nothing-here"})
    assert neither.status_code == 400 and "name the model" in neither.json()["error"]
    assert old_style.status_code == 404  # read as the name, and not installed


def test_an_unknown_route_and_a_wrong_method_answer_in_the_apis_shape():
    with served(ScriptedRuntime()) as client:
        missing = client.get("/v1/nothing")
        wrong = client.put("/v1/responses/resp_1")
        ollama = client.get("/api/chat")
    assert missing.status_code == 404 and "no route GET /v1/nothing" in \
        missing.json()["error"]["message"]
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "DELETE, GET"  # every method the path has
    assert "it takes DELETE, GET" in wrong.json()["error"]["message"]
    assert ollama.status_code == 405 and ollama.headers["allow"] == "POST"
    assert "GET is not allowed on /api/chat" in ollama.json()["error"]


def test_tokenize_with_no_model_loaded_is_a_404_asking_for_one():
    with served(ScriptedRuntime()) as client:
        r = client.post("/tokenize", json={"content": "hi"})
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "no model is loaded: name the model to tokenize with"


def test_the_scripted_model_is_a_valid_name():
    assert name_problem(MODEL) is None
