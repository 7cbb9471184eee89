"""A registry variant that is a split GGUF, end to end with a real model: Qwen2.5-Coder-0.5B's
GGUF split in three as llama.cpp's gguf-split does (tests/support/gguf_split.py), served by the
local Hub stand-in (tests/support/hub_server.py), pulled by `ember pull`'s code, loaded by
llama.cpp from its first part, and answering."""

from __future__ import annotations

import functools
import hashlib
import shutil
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from app import hardware
from app.pull import install
from app.pull.install import pull
from app.runtime import Runtime
from app.store import InstalledModel, Store
from backends.base import GenerationRequest, Message, SamplingParams
from tests.support import REPO
from tests.support.gguf_split import split_gguf
from tests.support.hub_server import start_hub, use_hub

HUB_REPO = "someone/Qwen2.5-Coder-0.5B-Instruct-split-GGUF"
MODEL_ID = "qwen2.5-coder-0.5b-instruct"
STEM = "qwen2.5-coder-0.5b-instruct-q4_k_m"


@pytest.fixture(scope="module")
def parts(store: Store, qwen: InstalledModel) -> list[Path]:
    """The 0.5B split in three, kept in the test home beside the key of what made it (the
    source's SHA-256 and the gguf package's version): only the first run splits."""
    folder = store.paths.home / "sources" / f"{STEM}-split3"
    marker = folder / "made-from.key"
    key = f"{qwen.sha256} gguf {version('gguf')}"
    names = [folder / f"{STEM}-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    if marker.is_file() and marker.read_text() == key and all(p.is_file() for p in names):
        return names
    shutil.rmtree(folder, ignore_errors=True)
    made = split_gguf(qwen.path, folder, STEM, 3)
    marker.write_text(key)
    return made


def split_registry(tmp_path: Path, parts: list[Path]) -> Path:
    """The real registry entry of the 0.5B with one variant: the split set from HUB_REPO."""
    raw = yaml.safe_load((REPO / "models.yaml").read_text(encoding="utf-8"))
    entry = next(m for m in raw["models"] if m["id"] == MODEL_ID)
    files = [{"name": p.name, "size_bytes": p.stat().st_size,
              "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in parts]
    entry["variants"] = [{"format": "gguf", "quant": "Q4_K_M-split", "file": parts[0].name,
                          "size_bytes": sum(f["size_bytes"] for f in files), "sha256": None,
                          "files": files, "sources": [{"kind": "hf", "repo": HUB_REPO}]}]
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [entry]}), encoding="utf-8")
    return path


def test_a_pulled_split_gguf_loads_from_its_first_part_and_answers(
        parts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home):
    server_hub, server = start_hub()
    try:
        for p in parts:
            server_hub.add(HUB_REPO, p.name, p.read_bytes())
        use_hub(monkeypatch, server_hub.url, tmp_path / "hf-cache")
        monkeypatch.setattr(install, "detect",
                            functools.partial(hardware.detect, measure=False))
        monkeypatch.setenv("EMBER_REGISTRY", str(split_registry(tmp_path, parts)))
        store = Store(isolated_home)
        model = pull(f"{MODEL_ID}:Q4_K_M-split", store=store)
    finally:
        server.shutdown()
    folder = model.path.parent
    assert model.path.name == parts[0].name
    assert sorted(p.name for p in folder.glob("*.gguf")) == [p.name for p in parts]
    assert (model.architecture, model.chat) == ("qwen2", True)
    assert model.size_bytes == sum(p.stat().st_size for p in parts)
    request = GenerationRequest(
        messages=(Message("user", "Reply with the word: yes"),),
        sampling=SamplingParams(temperature=0, max_tokens=8))
    with Runtime(store=store) as rt:
        loaded = rt.load(model.ref, context=512)
        assert loaded.model.path == model.path  # llama.cpp opens the first part
        answer, _ = rt.generate(model.ref, request).result()
    assert "yes" in answer.lower()
    store.remove(model.ref)
    assert not folder.exists()
