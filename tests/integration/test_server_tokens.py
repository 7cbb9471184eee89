"""/tokenize and /detokenize (llama-server's shape), GET /v1/models/{id}, and Ollama's
`GET /` and `HEAD /`, on the real Qwen2.5-Coder-0.5B."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from app.runtime import Runtime
from tests.support.live_server import live_server

TEXT = "def f(x):\n    return x ** 2  # ünïcode ✓ <|im_start|>"


@pytest.fixture(scope="module")
def server(store, qwen) -> Iterator[tuple[str, Runtime]]:
    with live_server(store) as s:
        yield s


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server[0] + path, json=body, timeout=120)


def test_nothing_loaded_asks_for_the_model_then_tokenize_loads_it(server, qwen):
    r = post(server, "/tokenize", {"content": "hi"})
    assert r.status_code == 404 and "no model is loaded: name the model" in r.text
    tokens = post(server, "/tokenize", {"model": qwen.ref, "content": TEXT}).json()["tokens"]
    assert tokens == server[1].tokenize(qwen.ref, TEXT)
    assert "<|im_start|>" not in str(tokens) and len(tokens) > 10


def test_tokenize_with_pieces_and_detokenize_round_trip(server, qwen):
    post(server, "/tokenize", {"model": qwen.ref, "content": "x"})  # loaded: model optional
    pieces = post(server, "/tokenize", {"content": TEXT, "with_pieces": True}).json()["tokens"]
    assert all(set(p) == {"id", "piece"} for p in pieces)
    assert pieces[-1]["piece"] == "<|im_start|>"  # one special token
    ids = [p["id"] for p in pieces]
    assert "".join(p["piece"] for p in pieces) == TEXT
    assert post(server, "/detokenize", {"tokens": ids}).json() == {"content": TEXT}
    assert post(server, "/detokenize", {"model": qwen.ref, "tokens": []}).json() == {
        "content": ""}


@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/detokenize", {"tokens": [1, 10_000_000]}, 400, "token 1 is 10000000, not an id"),
    ("/detokenize", {"tokens": [-5]}, 400, "token 0 is -5"),
    ("/detokenize", {"tokens": ["a"]}, 400, "tokens[0]"),
    ("/tokenize", {}, 400, "content"),
    ("/tokenize", {"model": "no-such-model", "content": "x"}, 404, "no-such-model"),
    ("/tokenize", {"model": "../etc", "content": "x"}, 400, "invalid model name"),
])
def test_bad_token_requests_are_clear_errors(server, qwen, path, body, status, message):
    post(server, "/tokenize", {"model": qwen.ref, "content": "x"})
    r = post(server, path, {"model": qwen.ref} | body if "model" not in body else body)
    assert r.status_code == status, r.text
    assert message in r.text


def test_get_one_model(server, qwen):
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0)
    card = client.models.retrieve(qwen.ref)
    assert card.id == qwen.ref and card.owned_by == "ember" and card.created > 0
    listed = {m.id for m in client.models.list()}
    assert qwen.id in listed
    with pytest.raises(openai.NotFoundError, match="not-installed"):
        client.models.retrieve("not-installed")


def test_ollama_root_answers_as_ollama_does(server):
    r = httpx.get(server[0] + "/")
    assert r.status_code == 200 and r.text == "Ollama is running"
    head = httpx.head(server[0] + "/")
    assert head.status_code == 200 and head.content == b""
