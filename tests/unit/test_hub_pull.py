"""`ember pull` of any Hub repo (hf.co/OWNER/REPO[:QUANT], OWNER/REPO), against the local
server speaking the Hub's protocol: what the registry path guarantees (resume, SHA-256 from the
Hub's LFS hash, disk space, cancel, HF_TOKEN, gated and missing files) holds, and the result is
an ordinary installed model."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from pathlib import Path

import pytest

from app import hardware
from app.config import Paths
from app.errors import ChecksumError, DownloadError
from app.fit import plan_for
from app.gguf_file import read_model_gguf
from app.pull import hf_pull
from app.pull.hf_pull import parse_hub_name
from app.pull.install import Cancelled, pull
from app.runtime import Runtime
from app.store import Store
from backends.errors import ModelFileError
from tests.support.hub_repos import add_gguf_repo, add_mlx_repo, model_gguf, projector_gguf
from tests.support.hub_server import start_hub, use_hub
from tests.support.machines import desktop

REPO = "someone/Tiny-Chat-GGUF"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Paths):
    server_hub, server = start_hub()
    use_hub(monkeypatch, server_hub.url, tmp_path / "hf-cache")
    # the recommendation ranks quantizations only: the bandwidth goes unmeasured
    monkeypatch.setattr(hf_pull, "detect", functools.partial(hardware.detect, measure=False))
    files = add_gguf_repo(server_hub, tmp_path, REPO, ["Q4_0", "Q8_0", "F16"],
                          weights=1_500_000, license="apache-2.0")
    yield {"hub": server_hub, "files": files, "store": Store(isolated_home), "tmp": tmp_path}
    server.shutdown()


def downloads(hub) -> list[dict]:
    """The GETs of whole files or their rest (a header's read asks for bytes=0-N)."""
    return [r for r in hub.requests if "/resolve/" in r["path"] and r["method"] == "GET"
            and not (r["range"] or "").partition("-")[2]]


@pytest.mark.parametrize("name", [
    "hf.co/someone/Tiny-Chat-GGUF:Q8_0", "huggingface.co/someone/Tiny-Chat-GGUF:q8_0",
    "https://huggingface.co/someone/Tiny-Chat-GGUF:Q8_0", "someone/Tiny-Chat-GGUF:Q8_0",
    "https://huggingface.co/someone/Tiny-Chat-GGUF/tree/main:Q8_0"])
def test_every_spelling_names_the_repo_and_quantization(name):
    assert parse_hub_name(name) == hf_pull.HubName(REPO, "Q8_0" if "q8" not in name else "q8_0")


@pytest.mark.parametrize("name", ["hf.co/../etc:Q4", "hf.co/onlyowner", "hf.co/a/b/c/d",
                                  "hf.co/a/..:Q4", "hf.co/a/b:Q4;rm"])
def test_a_malformed_hub_name_is_refused(name):
    with pytest.raises(DownloadError):
        parse_hub_name(name)


def test_a_quantization_is_pulled_verified_and_installed_under_the_repo(hub):
    events = []
    model = pull("hf.co/someone/Tiny-Chat-GGUF:q8_0", store=hub["store"],
                 on_progress=events.append)
    data = hub["files"]["Tiny-Chat-Q8_0.gguf"]
    assert (model.id, model.quant, model.format, model.origin, model.repo) == (
        "someone-tiny-chat-gguf", "Q8_0", "gguf", "hub", REPO)
    assert model.path == hub["store"].paths.models / "someone" / "Tiny-Chat-GGUF" / \
        "Tiny-Chat-Q8_0.gguf"
    assert model.path.read_bytes() == data
    assert model.sha256 == hashlib.sha256(data).hexdigest()
    assert model.architecture == "llama" and model.chat and model.context_length == 8192
    assert hub["store"].list() == [model]
    assert hub["store"].get("someone-tiny-chat-gguf:Q8_0") == model
    # and by the name it was pulled by, as an Ollama client asks for it next (not as a
    # remote endpoint's model)
    for name in ("hf.co/someone/Tiny-Chat-GGUF:Q8_0", "hf.co/someone/tiny-chat-gguf",
                 "huggingface.co/someone/Tiny-Chat-GGUF:q8_0"):
        assert hub["store"].get(name) == model
        assert not Runtime.is_remote(name)
    # only the asked-for file came down
    assert {r["path"].rsplit("/", 1)[1] for r in downloads(hub["hub"])} == {
        "Tiny-Chat-Q8_0.gguf"}
    assert events[-1].phase == "done"
    assert not any(hub["store"].paths.partial.glob("hub-*/"))  # the work folder is gone


def test_without_a_quantization_the_fit_models_pick_comes_down(hub):
    events = []
    model = pull(f"hf.co/{REPO}", store=hub["store"], on_progress=events.append, hw=desktop())
    assert model.quant == "F16"  # a roomy machine: the highest quality
    assert any(e.message.startswith("picked F16: recommended here:") for e in events)
    # the others' headers were read, not their weights
    served = hub["hub"].served
    assert served[(REPO, "Tiny-Chat-Q4_0.gguf")] < len(hub["files"]["Tiny-Chat-Q4_0.gguf"])


def test_a_missing_quantization_lists_the_ones_there_are(hub):
    with pytest.raises(DownloadError, match="has no quantization 'Q5_K_M'; it has: Q4_0, "
                                            "Q8_0, F16"):
        pull(f"hf.co/{REPO}:Q5_K_M", store=hub["store"])
    assert downloads(hub["hub"]) == []


def test_a_split_gguf_comes_as_its_set_with_the_vision_projector(hub):
    h, tmp = hub["hub"], hub["tmp"]
    parts = [model_gguf(tmp / f"p{i}.gguf", weights=300_000, split=(i, 3)) for i in (1, 2, 3)]
    for i, data in enumerate(parts, 1):
        h.add("o/Vision-GGUF", f"Q8_0/Vision-Q8_0-{i:05d}-of-00003.gguf", data)
    projector = projector_gguf(tmp / "mmproj.gguf")
    h.add("o/Vision-GGUF", "mmproj-Vision-f16.gguf", projector)
    h.add("o/Vision-GGUF", "Vision-Q4_0.gguf", model_gguf(tmp / "v4.gguf"))
    store = hub["store"]
    model = pull("hf.co/o/Vision-GGUF:Q8_0", store=store)
    folder = store.paths.models / "o" / "Vision-GGUF"
    assert model.path == folder / "Vision-Q8_0-00001-of-00003.gguf"  # what llama.cpp opens
    assert [(folder / f"Vision-Q8_0-{i:05d}-of-00003.gguf").read_bytes()
            for i in (1, 2, 3)] == parts
    assert (folder / "mmproj-Vision-f16.gguf").read_bytes() == projector
    assert model.projector == folder / "mmproj-Vision-f16.gguf"
    assert model.size_bytes == sum(len(p) for p in parts)
    assert store.list() == [model]
    assert not (folder / "Vision-Q4_0.gguf").exists()
    # the load plan counts every part's weights, not the first part's
    whole = read_model_gguf(model.path)
    assert whole.file_size == model.size_bytes and whole.tensor_count == 4
    plan = plan_for(model, "llamacpp", desktop())
    assert plan.memory_bytes > model.size_bytes + len(projector)
    assert "vision projector (256 tokens an image)" in plan.reason
    # a second quantization shares the projector (and records it); removing the last model
    # takes it away
    other = pull("hf.co/o/Vision-GGUF:Q4_0", store=store)
    assert other.projector_file == "mmproj-Vision-f16.gguf"
    store.remove(model.ref)
    assert sorted(p.name for p in folder.iterdir()) == [
        "Vision-Q4_0.gguf", "Vision-Q4_0.gguf.ember.json", "mmproj-Vision-f16.gguf"]
    store.remove(other.ref)
    assert not folder.exists()


def test_a_split_gguf_missing_a_part_on_disk_is_not_listed(hub):
    h, tmp = hub["hub"], hub["tmp"]
    for i in (1, 2):
        h.add("o/S-GGUF", f"S-Q8_0-{i:05d}-of-00002.gguf",
              model_gguf(tmp / f"s{i}.gguf", split=(i, 2)))
    model = pull("hf.co/o/S-GGUF", store=hub["store"])
    (model.path.parent / "S-Q8_0-00002-of-00002.gguf").unlink()
    assert hub["store"].list() == []


def test_an_mlx_repo_comes_as_its_folder(hub):
    add_mlx_repo(hub["hub"], hub["tmp"], "mlx-community/Tiny-Chat-4bit")
    model = pull("mlx-community/Tiny-Chat-4bit", store=hub["store"])
    assert (model.id, model.quant, model.format, model.architecture) == (
        "mlx-community-tiny-chat-4bit", "4bit", "mlx", "qwen2")
    assert model.path == hub["store"].paths.models / "mlx-community" / "Tiny-Chat-4bit"
    assert sorted(p.name for p in model.path.iterdir()) == [
        "config.json", "mlx.ember.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json"]  # the README is not a model file
    assert model.chat and model.context_length == 32768
    assert hub["store"].list() == [model]


def test_a_gated_repo_without_a_token_gets_one_line_saying_where_to_accept(hub):
    hub["hub"].repos[REPO].gated = "manual"
    with pytest.raises(DownloadError) as e:
        pull(f"hf.co/{REPO}:Q8_0", store=hub["store"])
    assert str(e.value) == (f"{REPO} is gated: accept its license on "
                            f"https://huggingface.co/{REPO} while logged in, then set HF_TOKEN "
                            "to a token of that account and pull again")
    assert downloads(hub["hub"]) == []


def test_a_gated_file_with_a_token_without_access_gets_the_same_line(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_no_access")
    hub["hub"].files[(REPO, "Tiny-Chat-Q8_0.gguf")].gated = True
    with pytest.raises(DownloadError, match=f"^{REPO} is gated: accept its license on "):
        pull(f"hf.co/{REPO}:Q8_0", store=hub["store"])
    assert all(r["auth"] == "Bearer hf_no_access" for r in hub["hub"].requests
               if r["path"].startswith(("/api/models/", f"/{REPO}/")))
    assert hub["store"].list() == []


def test_a_listed_file_missing_on_the_hub_is_a_404(hub):
    hub["hub"].files[(REPO, "Tiny-Chat-Q8_0.gguf")].missing = True
    with pytest.raises(DownloadError, match=r"not found on the hub \(HTTP 404\)"):
        pull(f"hf.co/{REPO}:Q8_0", store=hub["store"])
    assert hub["store"].list() == []


def test_a_missing_repo_is_a_404(hub):
    with pytest.raises(DownloadError, match=r"the repo nobody/none not found on the hub"):
        pull("hf.co/nobody/none", store=hub["store"])


def test_a_dropped_connection_is_resumed_with_a_range_request(hub):
    hub["hub"].files[(REPO, "Tiny-Chat-F16.gguf")].drop_after = 2_500_000
    model = pull(f"hf.co/{REPO}:F16", store=hub["store"])
    assert model.path.read_bytes() == hub["files"]["Tiny-Chat-F16.gguf"]
    ranges = [r["range"] for r in downloads(hub["hub"])]
    # the whole MiB chunks written before the drop are kept
    assert ranges == [None, f"bytes={2 << 20}-"]


def test_a_cancelled_pull_resumes_from_its_partial_file(hub):
    hub["hub"].files[(REPO, "Tiny-Chat-F16.gguf")].bytes_per_s = 4_000_000
    cancel = threading.Event()

    def cancel_midway(p):
        if p.phase == "download" and p.done_bytes > 500_000:
            cancel.set()

    with pytest.raises(Cancelled):
        pull(f"hf.co/{REPO}:F16", store=hub["store"], on_progress=cancel_midway, cancel=cancel)
    assert hub["store"].list() == []
    (part,) = hub["store"].paths.partial.glob("hub-*/files/Tiny-Chat-F16.gguf.part")
    kept = part.stat().st_size
    hub["hub"].files[(REPO, "Tiny-Chat-F16.gguf")].bytes_per_s = None
    model = pull(f"hf.co/{REPO}:F16", store=hub["store"])
    assert model.path.read_bytes() == hub["files"]["Tiny-Chat-F16.gguf"]
    assert downloads(hub["hub"])[-1]["range"] == f"bytes={kept}-"


def test_a_corrupted_download_is_removed_and_nothing_installed(hub):
    hub["hub"].files[(REPO, "Tiny-Chat-Q8_0.gguf")].corrupt = True
    with pytest.raises(ChecksumError, match="checksum mismatch for Tiny-Chat-Q8_0.gguf"):
        pull(f"hf.co/{REPO}:Q8_0", store=hub["store"])
    assert hub["store"].list() == []
    assert not list(hub["store"].paths.partial.glob("hub-*/files/*.gguf*"))


def test_not_enough_disk_space_is_refused_before_downloading(hub, full_disk):
    with pytest.raises(DownloadError, match="not enough disk space"):
        pull(f"hf.co/{REPO}:Q8_0", store=hub["store"])
    assert downloads(hub["hub"]) == []


def test_a_second_pull_finds_the_model_installed(hub):
    first = pull(f"hf.co/{REPO}:Q4_0", store=hub["store"])
    hub["hub"].requests.clear()
    events = []
    assert pull(f"hf.co/{REPO}:Q4_0", store=hub["store"], on_progress=events.append) == first
    assert downloads(hub["hub"]) == [] and events[-1].message == "already installed"


def test_a_repo_file_the_store_already_has_from_the_registry_is_not_overwritten(hub):
    store = hub["store"]
    model = pull(f"hf.co/{REPO}:Q4_0", store=store)
    manifest = model.path.with_name(model.path.name + ".ember.json")
    raw = json.loads(manifest.read_text())
    raw |= {"id": "registry-model", "origin": "registry", "repo": ""}
    manifest.write_text(json.dumps(raw))
    events = []
    again = pull(f"hf.co/{REPO}:Q4_0", store=store, on_progress=events.append)
    assert again.ref == "registry-model:Q4_0"
    assert events[-1].message == "already installed as registry-model:Q4_0"


def test_the_ollama_api_pulls_an_hf_co_name_with_streamed_progress(hub):
    from fastapi.testclient import TestClient

    from app.runtime import Runtime
    from app.server.app import ServerSettings, create_app
    from tests.support.fake_runtime import LOOPBACK

    with Runtime(store=hub["store"]) as rt, TestClient(create_app(rt, ServerSettings()),
                                                       base_url=LOOPBACK) as client:
        r = client.post("/api/pull", json={"model": f"hf.co/{REPO}:Q8_0"})
        assert r.status_code == 200
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert lines[-1] == {"status": "success"}
        assert any(e.get("status") == "pulling someone-tiny-chat-gguf:Q8_0"
                   and e.get("completed") for e in lines)
        assert any(e.get("status") == "verifying sha256 digest" for e in lines)
        tags = client.get("/api/tags").json()["models"]
        assert [t["name"] for t in tags] == ["someone-tiny-chat-gguf:Q8_0"]
        missing = client.post("/api/pull", json={"model": f"hf.co/{REPO}:Q2_K"})
        assert "has no quantization 'Q2_K'" in missing.text.splitlines()[-1]
        bad = client.post("/api/pull", json={"model": "hf.co/a/b/c"})
        assert bad.status_code == 400


def test_the_ember_command_searches_lists_files_pulls_and_lists_the_model(hub):
    from tests.support.cli import ember

    hub["hub"].repo(REPO, tags=("gguf",), library_name="gguf", license="apache-2.0",
                    downloads=1234, likes=7)
    found = ember("search", "tiny", "--gguf", "--json")
    assert found.returncode == 0, found.stderr
    (repo,) = json.loads(found.stdout)
    assert (repo["id"], repo["downloads"], repo["likes"], repo["license"]) == (
        REPO, 1234, 7, "apache-2.0")
    table = ember("search", "tiny")
    assert REPO in table.stdout and "1.2k" in table.stdout and "apache-2.0" in table.stdout
    listed = ember("files", f"hf.co/{REPO}", "--json")
    assert listed.returncode == 0, listed.stderr
    quants = {q["name"]: q for q in json.loads(listed.stdout)["quants"]}
    assert sorted(quants) == ["F16", "Q4_0", "Q8_0"]
    assert quants["Q8_0"]["fit"]["placement"] in ("cpu", "full_gpu", "partial")
    pulled = ember("pull", f"hf.co/{REPO}:Q8_0")
    assert pulled.returncode == 0, pulled.stderr
    assert "someone-tiny-chat-gguf:Q8_0: installed" in pulled.stderr
    models = json.loads(ember("list", "--json").stdout)
    assert [(m["id"], m["quant"], m["repo"]) for m in models] == [
        ("someone-tiny-chat-gguf", "Q8_0", REPO)]
    missing = ember("pull", f"hf.co/{REPO}:Q2_K")
    assert missing.returncode == 1
    assert "has no quantization 'Q2_K'; it has: Q4_0, Q8_0, F16" in missing.stderr


def test_a_file_that_is_no_gguf_is_refused_before_its_download(hub):
    hub["hub"].add(REPO, "Tiny-Chat-Q6_K.gguf", b"<html>rate limited</html>" + b" " * 400_000)
    with pytest.raises(ModelFileError, match="Tiny-Chat-Q6_K.gguf: not a GGUF file"):
        pull(f"hf.co/{REPO}:Q6_K", store=hub["store"])
    assert hub["hub"].served[(REPO, "Tiny-Chat-Q6_K.gguf")] < 400_000  # its header only
    assert hub["store"].list() == []


def test_a_mlx_folder_that_is_no_model_leaves_nothing_behind(hub):
    hub["hub"].repo("o/broken-4bit", tags=("mlx",))
    hub["hub"].add("o/broken-4bit", "config.json", b'{"no_model_type": 1}')
    hub["hub"].add("o/broken-4bit", "model.safetensors", b"\0" * 100)
    with pytest.raises(ModelFileError, match="has no model_type"):
        pull("o/broken-4bit", store=hub["store"])
    assert hub["store"].list() == []
    assert not any(hub["store"].paths.partial.glob("hub-*/"))
    assert not (hub["store"].paths.models / "o").exists()


def test_a_cancelled_mlx_folder_resumes_fetching_only_what_is_missing(hub):
    h = hub["hub"]
    add_mlx_repo(h, hub["tmp"], "mlx-community/Tiny-Chat-4bit")
    weights = h.files[("mlx-community/Tiny-Chat-4bit", "model.safetensors")]
    weights.data = weights.data * 20  # 2.5 MB, throttled: a cancel lands mid-file
    weights.bytes_per_s = 1_000_000
    cancel = threading.Event()

    def cancel_in_weights(p):
        if p.phase == "download" and p.done_bytes > 300_000:
            cancel.set()

    with pytest.raises(Cancelled):
        pull("mlx-community/Tiny-Chat-4bit", store=hub["store"], on_progress=cancel_in_weights,
             cancel=cancel)
    weights.bytes_per_s = None
    h.requests.clear()
    model = pull("mlx-community/Tiny-Chat-4bit", store=hub["store"])
    fetched = {r["path"].rsplit("/", 1)[1]: r["range"] for r in downloads(h)}
    # config.json (listed first) was kept; the weights resume; the files after them come now
    assert list(fetched) == ["model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert fetched["model.safetensors"].startswith("bytes=")
    assert (model.path / "model.safetensors").read_bytes() == weights.data


def test_a_hub_repos_damaged_projector_is_refused_by_its_lfs_sha256(hub):
    h, tmp, store = hub["hub"], hub["tmp"], hub["store"]
    h.add("o/Seeing-GGUF", "Seeing-Q4_0.gguf", model_gguf(tmp / "s4.gguf"))
    projector = projector_gguf(tmp / "mmproj.gguf")
    h.add("o/Seeing-GGUF", "mmproj-Seeing-f16.gguf", projector).corrupt = True
    with pytest.raises(ChecksumError, match="checksum mismatch for mmproj-Seeing-f16.gguf"):
        pull("hf.co/o/Seeing-GGUF:Q4_0", store=store)
    assert store.list() == []
    h.files[("o/Seeing-GGUF", "mmproj-Seeing-f16.gguf")].corrupt = False
    model = pull("hf.co/o/Seeing-GGUF:Q4_0", store=store)
    assert model.projector is not None and model.projector.read_bytes() == projector
