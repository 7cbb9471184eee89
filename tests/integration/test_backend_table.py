"""The Runtime's backend table against the real backends, and what it decides: which backend
has embeddings, and the clear 400 an API client gets where one has none."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from app.runtime import Runtime
from app.runtime.backend_table import BACKENDS, make_backend
from app.server.app import create_app
from backends.errors import InvalidRequestError
from tests.support import LOOPBACK


@pytest.mark.parametrize("name", list(BACKENDS))
def test_each_backend_says_what_its_table_entry_says(name):
    backend = make_backend(name)
    assert backend.name == name
    assert backend.capabilities() == BACKENDS[name].capabilities


def test_the_mlx_backend_itself_refuses_embeddings_clearly():
    with pytest.raises(InvalidRequestError, match="this backend has no embeddings"):
        make_backend("mlx").embed(["hello"])


def test_embeddings_on_an_mlx_model_are_a_400_and_on_a_gguf_model_unit_vectors(
        store, qwen, qwen_mlx):
    with Runtime(store=store) as runtime, \
            TestClient(create_app(runtime), base_url=LOOPBACK) as client:
        r = client.post("/v1/embeddings", json={"model": qwen_mlx.ref, "input": "hello"})
        assert r.status_code == 400
        assert "this backend has no embeddings" in r.json()["error"]["message"]
        assert runtime.loaded() == []  # refused before loading anything
        r = client.post("/api/embed", json={"model": qwen_mlx.ref, "input": "hello"})
        assert r.status_code == 400 and "no embeddings" in r.json()["error"]

        r = client.post("/v1/embeddings", json={"model": qwen.ref, "input": ["hello", "world"]})
        assert r.status_code == 200, r.text
        vectors = [d["embedding"] for d in r.json()["data"]]
        assert len(vectors) == 2 and len(vectors[0]) == 896  # Qwen2.5 0.5B's hidden size
        assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-3) for v in vectors)
        assert vectors[0] != vectors[1]
