"""packaging/pin_hashes.py against the local Hub stand-in (tests/support/hub_server.py), which
lists repos as the Hub's /api/models/{repo}/tree does, LFS sha256 included."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from app.registry import load_registry
from tests.support.hub_server import start_hub

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("pin_hashes", ROOT / "packaging/pin_hashes.py")
assert _spec and _spec.loader
pin_hashes = importlib.util.module_from_spec(_spec)
sys.modules["pin_hashes"] = pin_hashes  # its dataclass looks its module up
_spec.loader.exec_module(pin_hashes)

REPO, FILE = "unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q4_K_M.gguf"  # null in models.yaml


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch):
    server_hub, server = start_hub()
    monkeypatch.setenv("HF_ENDPOINT", server_hub.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield server_hub
    server.shutdown()


def test_a_missing_sha256_is_filled_from_the_hub_and_nothing_else_changes(hub, tmp_path: Path):
    registry = tmp_path / "models.yaml"
    shutil.copy(ROOT / "models.yaml", registry)
    before = registry.read_text(encoding="utf-8").splitlines()
    data = b"GGUF" + bytes(range(256)) * 4
    hub.add(REPO, FILE, data)
    hub.add(REPO, "README.md", b"# not LFS\n")
    pinned, missed = pin_hashes.pin(registry, out=lambda _: None)
    after = registry.read_text(encoding="utf-8").splitlines()
    assert pinned == 1
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    sha = hashlib.sha256(data).hexdigest()
    assert changed == [("        sha256: null", f"        sha256: {sha}")]
    assert after[after.index(changed[0][1]) - 2] == f"        file: {FILE}"
    # the Hub stand-in has no other repo: each other null is named with why, none is guessed
    assert f"Qwen3-0.6B-Q5_K_M.gguf: {REPO} has no file Qwen3-0.6B-Q5_K_M.gguf" in missed
    assert "all-MiniLM-L6-v2-F16.gguf: no hf source" in missed
    # the GGUF variants of models.yaml with a null sha256, less one: 102 before issue 42, whose
    # vision models add five (Qwen2.5-VL 3B, Qwen3-VL 2B and 4B, SmolVLM 256M and 500M; the
    # Qwen2.5-VL 7B is pinned), and eight projectors (`mmproj` blocks) with a null sha256 (all
    # but the Gemma 3 4B's and the Qwen2.5-VL 7B's)
    assert len(missed) == 115
    # a split GGUF's checksums go on its parts: its variant's sha256 is never filled
    assert not any("gpt-oss-120b-mxfp4" in m for m in missed)


def test_a_projectors_missing_sha256_is_filled_once_for_every_quantization(hub, tmp_path: Path):
    registry = tmp_path / "models.yaml"
    shutil.copy(ROOT / "models.yaml", registry)
    before = registry.read_text(encoding="utf-8").splitlines()
    data = b"GGUF" + bytes(range(256)) * 8
    hub.add("ggml-org/gemma-3-12b-it-GGUF", "mmproj-model-f16.gguf", data)
    pinned, _ = pin_hashes.pin(registry, out=lambda _: None)
    after = registry.read_text(encoding="utf-8").splitlines()
    assert pinned == 1
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    sha = hashlib.sha256(data).hexdigest()
    assert changed == [("          sha256: null", f"          sha256: {sha}")]
    # the block is an anchor its other quantizations alias: each of them has the hash now
    spec = load_registry(registry).get("gemma-3-12b-it")
    assert {v.mmproj.sha256 for v in spec.variants if v.format == "gguf"} == {sha}


def test_a_file_the_hub_keeps_outside_lfs_stays_null(hub, tmp_path: Path):
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "# a comment that stays\nmodels:\n  - id: m\n    variants:\n      - format: gguf\n"
        "        file: small.gguf.txt\n        sha256: null  # why it is null\n        sources:\n"
        "          - {kind: hf, repo: someone/small}\n", encoding="utf-8")
    text = registry.read_text(encoding="utf-8")
    hub.add("someone/small", "small.gguf.txt", b"tiny text")
    pinned, missed = pin_hashes.pin(registry, out=lambda _: None)
    assert (pinned, missed) == (0, ["small.gguf.txt: someone/small/small.gguf.txt is not an "
                                    "LFS file (no sha256)"])
    assert registry.read_text(encoding="utf-8") == text
