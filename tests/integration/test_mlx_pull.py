"""`ember pull` of an MLX variant (a whole repo directory) from the Hugging Face hub protocol,
served by tests/support/hub_server.py: a real MLX model (Qwen2.5-Coder-0.5B-Instruct converted at 8
bits by `ember convert`'s code, resharded in two like a large mlx-community repo)."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest
import yaml

from app.errors import ChecksumError, DownloadError
from app.pull.install import Cancelled, pull
from app.store import InstalledModel, Store, dir_sha256
from tests.support import REPO
from tests.support.hub_server import start_hub, use_hub

LISTED = "mlx-community/Qwen2.5-Coder-0.5B-Instruct-8bit"  # the registry lists its files
UNLISTED = "someone/Qwen2.5-Coder-0.5B-Instruct-mlx"  # the hub's listing gives them
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
MODEL_ID = "qwen2.5-coder-0.5b-instruct"
REGISTRY = REPO / "models.yaml"


@pytest.fixture(scope="module")
def repo(qwen_mlx: InstalledModel, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The converted model's files, its weights split into two shards with an index."""
    import mlx.core as mx

    weights = mx.load(str(qwen_mlx.path / "model.safetensors"))
    names = sorted(weights)
    halves = (names[: len(names) // 2], names[len(names) // 2:])
    folder = tmp_path_factory.mktemp("sharded")
    files: dict[str, bytes] = {"config.json": (qwen_mlx.path / "config.json").read_bytes()}
    weight_map = {}
    for shard, keys in zip(SHARDS, halves, strict=True):
        mx.save_safetensors(str(folder / shard), {k: weights[k] for k in keys},
                            metadata={"format": "mlx"})
        files[shard] = (folder / shard).read_bytes()
        weight_map.update(dict.fromkeys(keys, shard))
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": sum(len(files[s]) for s in SHARDS)},
         "weight_map": weight_map}).encode()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        files[name] = (qwen_mlx.path / name).read_bytes()
    return files


def write_registry(tmp_path: Path, files: dict[str, bytes],
                   registry_sha256: dict[str, str] | None = None) -> Path:
    """The real registry entry of the 0.5B with two MLX variants: `8bit` lists its files with
    their SHA-256 (as models.yaml records them), `hub8bit` lists none."""
    raw = yaml.safe_load(REGISTRY.read_text())
    entry = next(m for m in raw["models"] if m["id"] == MODEL_ID)
    listed = [{"name": n, "size_bytes": len(d),
               "sha256": (registry_sha256 or {}).get(n) or hashlib.sha256(d).hexdigest()}
              for n, d in files.items()]
    size = sum(len(d) for d in files.values())
    entry["variants"] = [v for v in entry["variants"] if v["format"] == "gguf"] + [
        {"format": "mlx", "quant": "8bit", "file": "", "size_bytes": size, "sha256": None,
         "files": listed, "sources": [{"kind": "hf", "repo": LISTED}]},
        {"format": "mlx", "quant": "hub8bit", "file": "", "size_bytes": size, "sha256": None,
         "sources": [{"kind": "hf", "repo": UNLISTED}]},
        {"format": "mlx", "quant": "mirror8bit", "file": "", "size_bytes": size,
         "sha256": None, "sources": [{"kind": "mirror", "packages": ["x-part1"]}]}]
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [entry]}))
    return path


@pytest.fixture
def hub(repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home):
    server_hub, server = start_hub()
    for name in (LISTED, UNLISTED):
        for filename, data in repo.items():
            server_hub.add(name, filename, data)
        server_hub.add(name, "README.md", b"# a model card\n")  # not part of the model
        server_hub.add(name, ".gitattributes", b"*.safetensors filter=lfs\n")
    use_hub(monkeypatch, server_hub.url, tmp_path / "hf-cache")
    monkeypatch.setenv("EMBER_REGISTRY", str(write_registry(tmp_path, repo)))
    yield {"hub": server_hub, "store": Store(isolated_home), "files": repo, "tmp": tmp_path}
    server.shutdown()


def file_gets(hub, repo_name: str) -> list[tuple[str, str | None]]:
    """(file, Range header) of each GET of a file of `repo_name`."""
    prefix = f"/{repo_name}/resolve/main/"
    return [(r["path"][len(prefix):], r["range"]) for r in hub.requests
            if r["method"] == "GET" and r["path"].startswith(prefix)]


def installed_files(model: InstalledModel) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in model.path.iterdir()
            if not p.name.endswith(".ember.json")}


def test_pull_installs_a_sharded_mlx_repo_that_then_runs(hub):
    hub["hub"].files[(LISTED, SHARDS[0])].drop_after = 50_000_000  # a dropped connection
    events = []
    model = pull(f"{MODEL_ID}:8bit", store=hub["store"], on_progress=events.append)
    assert model.path == hub["store"].paths.models / "mlx-community" / LISTED.split("/")[1]
    assert (model.format, model.quant, model.architecture, model.chat) == (
        "mlx", "8bit", "qwen2", True)
    assert installed_files(model) == hub["files"]  # and no README.md or .gitattributes
    assert hub["store"].list() == [model]
    assert model.sha256 == dir_sha256(model.path)
    # the dropped shard was continued where it stopped, not restarted
    shard_gets = [rng for name, rng in file_gets(hub["hub"], LISTED) if name == SHARDS[0]]
    assert shard_gets[0] is None and len(shard_gets) == 2
    assert 40_000_000 < int(shard_gets[1].removeprefix("bytes=").rstrip("-")) <= 50_000_000
    downloads = [e for e in events if e.phase == "download"]
    total = sum(len(d) for d in hub["files"].values())
    assert downloads[-1].total_bytes == total and downloads[-1].done_bytes == total
    assert events[-1].phase == "done" and not hub["store"].paths.partial.joinpath(
        f"{MODEL_ID}-8bit").exists()

    from backends.base import GenerationRequest, LoadPlan, SamplingParams
    from backends.mlx.backend import MlxBackend

    backend = MlxBackend()
    backend.load(model, LoadPlan(context=256, threads=2, batch=64))  # packed: mlx's own qmm
    try:
        *_, done = backend.generate(GenerationRequest(
            prompt="def add(a, b):", sampling=SamplingParams(temperature=0.0, max_tokens=6)))
    finally:
        backend.unload()
    assert "return" in done.text


def test_without_a_file_list_the_hubs_listing_and_checksums_are_used(hub):
    model = pull(f"{MODEL_ID}:hub8bit", store=hub["store"])
    assert installed_files(model) == hub["files"]
    assert any(r["path"].startswith(f"/api/models/{UNLISTED}/tree/main")
               for r in hub["hub"].requests)
    # a small file kept in git is checked against its git blob id
    hub["store"].remove(model.ref)
    hub["hub"].files[(UNLISTED, "config.json")].corrupt = True
    with pytest.raises(ChecksumError, match="config.json from .*expected git blob"):
        pull(f"{MODEL_ID}:hub8bit", store=hub["store"])


def test_the_registrys_sha256_wins_over_what_the_hub_says(hub, monkeypatch):
    # the hub serves config.json consistently with its own ETag, the registry expects other
    monkeypatch.setenv("EMBER_REGISTRY", str(write_registry(
        hub["tmp"], hub["files"], {"config.json": "0" * 64})))
    with pytest.raises(ChecksumError, match="checksum mismatch for config.json from "
                                            f"{LISTED}: expected 0000"):
        pull(f"{MODEL_ID}:8bit", store=hub["store"])
    assert hub["store"].list() == []


def test_a_cancelled_pull_resumes_without_fetching_finished_files_again(hub):
    store, cancel = hub["store"], threading.Event()
    first = len(hub["files"]["config.json"]) + len(hub["files"][SHARDS[0]])

    def cancel_in_second_shard(p):
        if p.phase == "download" and p.done_bytes > first + 20_000_000:
            cancel.set()

    with pytest.raises(Cancelled):
        pull(f"{MODEL_ID}:8bit", store=store, on_progress=cancel_in_second_shard, cancel=cancel)
    assert store.list() == []
    work = store.paths.partial / f"{MODEL_ID}-8bit"
    assert set(json.loads((work / "verified.json").read_text())) == {"config.json", SHARDS[0]}
    kept = (work / "files" / f"{SHARDS[1]}.part").stat().st_size
    assert kept > 20_000_000
    hub["hub"].requests.clear()
    events = []
    model = pull(f"{MODEL_ID}:8bit", store=store, on_progress=events.append)
    assert installed_files(model) == hub["files"]
    gets = file_gets(hub["hub"], LISTED)
    assert [name for name, _ in gets] == [SHARDS[1], "model.safetensors.index.json",
                                          "tokenizer.json", "tokenizer_config.json"]
    assert gets[0][1] == f"bytes={kept}-"
    assert events[0].message == "resuming" and events[0].done_bytes == first


def test_a_corrupted_file_fails_verification_and_keeps_the_existing_install(hub):
    store = hub["store"]
    installed = pull(f"{MODEL_ID}:8bit", store=store)
    hub["hub"].files[(UNLISTED, SHARDS[1])].corrupt = True
    with pytest.raises(ChecksumError, match=f"checksum mismatch for {SHARDS[1]} from "
                                            f"{UNLISTED}"):
        pull(f"{MODEL_ID}:hub8bit", store=store)
    # the model installed before is still listed and whole
    assert store.list() == [installed]
    assert dir_sha256(installed.path) == installed.sha256
    # the damaged shard is gone; the verified files stay for the next pull
    work = store.paths.partial / f"{MODEL_ID}-hub8bit" / "files"
    assert (work / SHARDS[0]).read_bytes() == hub["files"][SHARDS[0]]
    assert not (work / SHARDS[1]).exists() and not (work / f"{SHARDS[1]}.part").exists()
    hub["hub"].files[(UNLISTED, SHARDS[1])].corrupt = False
    hub["hub"].requests.clear()
    again = pull(f"{MODEL_ID}:hub8bit", store=store)
    assert installed_files(again) == hub["files"]
    assert SHARDS[0] not in [name for name, _ in file_gets(hub["hub"], UNLISTED)]
    assert sorted(m.ref for m in store.list()) == [f"{MODEL_ID}:8bit", f"{MODEL_ID}:hub8bit"]


def test_an_mlx_variant_without_a_hub_repo_is_a_clear_error(hub):
    with pytest.raises(DownloadError, match="names no Hugging Face repo"):
        pull(f"{MODEL_ID}:mirror8bit", store=hub["store"])
