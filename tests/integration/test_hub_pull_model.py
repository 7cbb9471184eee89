"""A GGUF the registry does not know, pulled from a Hub repo (the local server speaking the
Hub's protocol) by `hf.co/OWNER/REPO:QUANT`, loads and answers: the real Qwen2.5-Coder-0.5B
renamed, so its bytes (and SHA-256) are not the registry's file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from app.config import Paths
from app.gguf_file import read_gguf
from app.store import InstalledModel, Store
from tests.support.cli import ember
from tests.support.hub_server import start_hub, use_hub

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
    use_hub(monkeypatch, hub.url, tmp_path / "hf-cache")
    hub.repo(REPO, tags=("gguf",), library_name="gguf", license="apache-2.0")
    hub.add(REPO, FILE, data)
    try:
        pulled = ember("pull", f"hf.co/{REPO}:q4_k_m")
        assert pulled.returncode == 0, pulled.stderr
        # `ember run` finds it by the same name (hf.co/... is local, not a remote endpoint)
        hub.requests.clear()
        answer = ember("run", f"hf.co/{REPO}:Q4_K_M", "What is 2 + 3? Answer with the "
                       "number only.", "--temperature", "0", "--max-tokens", "8", "--json")
    finally:
        server.shutdown()
    assert answer.returncode == 0, answer.stderr
    assert not [r for r in hub.requests if "/resolve/" in r["path"]]  # not pulled again
    out = json.loads(answer.stdout)
    assert "5" in out["text"] and out["model"] == "tester-renamed-coder-0.5b-gguf"
    (model,) = Store(isolated_home).list()
    assert (model.id, model.quant, model.origin, model.repo) == (
        "tester-renamed-coder-0.5b-gguf", "Q4_K_M", "hub", REPO)
    assert read_gguf(model.path).name.strip() == "Renamed Coder"
    assert model.chat and model.architecture == "qwen2"
