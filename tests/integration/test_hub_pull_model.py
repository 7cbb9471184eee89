"""A GGUF the registry does not know, pulled from a Hub repo (the local server speaking the
Hub's protocol) by `hf.co/OWNER/REPO:QUANT`, loads and answers: the real Qwen2.5-Coder-0.5B
renamed, so its bytes (and SHA-256) are not the registry's file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from app.config import Paths
from app.gguf_file import read_gguf
from app.pull.install import pull
from app.runtime import Runtime
from app.store import InstalledModel, Store
from backends.base import GenerationRequest, Message, SamplingParams
from tests.support.hub_server import start_hub

REPO = "tester/Renamed-Coder-0.5B-GGUF"
FILE = "Renamed-Coder-0.5B-Instruct-Q4_K_M.gguf"


def renamed(model: InstalledModel, dest: Path, name: str) -> bytes:
    """`model`'s file with general.name set to `name`, padded to the old name's length so
    no offset in the file moves (tensor data stays aligned)."""
    data = bytearray(model.path.read_bytes())
    old = str(read_gguf(model.path).metadata["general.name"]).encode()
    key = len(b"general.name").to_bytes(8, "little") + b"general.name"
    at = data.index(key + (8).to_bytes(4, "little") + len(old).to_bytes(8, "little") + old)
    value = at + len(key) + 4 + 8
    data[value:value + len(old)] = name.encode().ljust(len(old))[:len(old)]
    dest.write_bytes(data)
    return bytes(data)


def test_a_renamed_real_gguf_pulls_by_hf_co_name_loads_and_answers(
        qwen: InstalledModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        isolated_home: Paths):
    data = renamed(qwen, tmp_path / FILE, "Renamed Coder")
    assert hashlib.sha256(data).hexdigest() != qwen.sha256
    hub, server = start_hub()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    hub.repo(REPO, tags=("gguf",), library_name="gguf", license="apache-2.0")
    hub.add(REPO, FILE, data)
    try:
        store = Store(isolated_home)
        model = pull(f"hf.co/{REPO}:q4_k_m", store=store)
    finally:
        server.shutdown()
    assert (model.id, model.quant, model.origin) == ("tester-renamed-coder-0.5b-gguf",
                                                     "Q4_K_M", "hub")
    assert read_gguf(model.path).name.strip() == "Renamed Coder"
    assert model.chat and model.architecture == "qwen2"
    request = GenerationRequest(
        messages=(Message("user", "What is 2 + 3? Answer with the number only."),),
        sampling=SamplingParams(temperature=0, max_tokens=8))
    with Runtime(store=store) as rt:
        answer, stats = rt.generate(model.ref, request).result()
    assert "5" in answer
