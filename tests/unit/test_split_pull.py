"""`ember pull` of a registry variant that is a split GGUF (its parts in `files`), against the
local server speaking the Hub's protocol (tests/support/hub_server.py): every part comes,
resumed and verified, and the set becomes one installed model only once all parts are in."""

from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path

import pytest
import yaml

from app import hardware
from app.config import Paths
from app.errors import ChecksumError, DownloadError
from app.fit import fits_for, plan_for
from app.gguf_file import read_model_gguf
from app.pull import install
from app.pull.install import Cancelled, pull
from app.registry import load_registry
from app.runtime.model_traits import model_traits
from app.store import Store
from tests.support.hub_repos import model_gguf
from tests.support.hub_server import start_hub, use_hub
from tests.support.machines import desktop

REPO = "someone/Big-GGUF"
PARTS = [f"big-q8_0-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
REF = "big:Q8_0"


def split_registry(tmp_path: Path, parts: list[bytes], pinned: bool = True) -> Path:
    """A registry of one model whose Q8_0 is the split GGUF `parts` of REPO (each part's
    SHA-256 pinned, or none: the hub's LFS hashes are checked)."""
    files = [{"name": n, "size_bytes": len(d),
              "sha256": hashlib.sha256(d).hexdigest() if pinned else None}
             for n, d in zip(PARTS, parts, strict=True)]
    model = {"id": "big", "family": "test", "name": "Big", "description": "a split model",
             "license": "mit", "params": 64, "context": {"default": 256, "max": 256},
             "chat": True,
             "arch": {"type": "llama", "layers": 1, "hidden": 8, "heads": 2, "kv_heads": 2,
                      "head_dim": 4, "vocab": 8, "ffn": 8},
             "variants": [{"format": "gguf", "quant": "Q8_0", "file": PARTS[0],
                           "size_bytes": sum(len(d) for d in parts), "sha256": None,
                           "files": files, "sources": [{"kind": "hf", "repo": REPO}]}]}
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [model]}), encoding="utf-8")
    return path


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Paths):
    parts = [model_gguf(tmp_path / f"p{i}.gguf", weights=600_000, split=(i, 3))
             for i in (1, 2, 3)]
    server_hub, server = start_hub()
    for name, data in zip(PARTS, parts, strict=True):
        server_hub.add(REPO, name, data)
    use_hub(monkeypatch, server_hub.url, tmp_path / "hf-cache")
    monkeypatch.setattr(install, "detect", functools.partial(hardware.detect, measure=False))
    monkeypatch.setenv("EMBER_REGISTRY", str(split_registry(tmp_path, parts)))
    yield {"hub": server_hub, "parts": parts, "store": Store(isolated_home), "tmp": tmp_path}
    server.shutdown()


def part_gets(hub) -> list[tuple[str, str | None]]:
    """(part, Range header) of each GET of a part."""
    prefix = f"/{REPO}/resolve/main/"
    return [(r["path"][len(prefix):], r["range"]) for r in hub.requests
            if r["method"] == "GET" and r["path"].startswith(prefix)]


def test_every_part_comes_and_the_set_is_one_model(hub):
    store, parts = hub["store"], hub["parts"]
    events = []
    model = pull(REF, store=store, on_progress=events.append)
    folder = store.paths.models / "someone" / "Big-GGUF"
    assert model.path == folder / PARTS[0]  # what llama.cpp opens
    assert [(folder / n).read_bytes() for n in PARTS] == parts
    assert (model.format, model.origin, model.chat) == ("gguf", "registry", True)
    assert model.size_bytes == sum(len(d) for d in parts)
    assert store.list() == [model]
    # one progress over the whole set, not per part
    total = sum(len(d) for d in parts)
    downloads = [e for e in events if e.phase == "download"]
    assert {e.total_bytes for e in downloads} == {total}
    assert downloads[-1].done_bytes == total
    assert [e.done_bytes for e in downloads] == sorted(e.done_bytes for e in downloads)
    assert events[-1].phase == "done"
    assert not (store.paths.partial / "big-Q8_0").exists()
    # the fit and the load plan count every part; the metadata is the first part's
    assert read_model_gguf(model.path).file_size == model.size_bytes
    assert plan_for(model, "llamacpp", desktop()).memory_bytes > model.size_bytes
    assert model_traits(model).template  # what /api/show gives
    # a second pull finds it installed; rm takes every part and the folder
    assert pull(REF, store=store) == model
    store.remove(REF)
    assert store.list() == [] and not folder.exists()


def test_an_interrupted_set_resumes_without_fetching_finished_parts(hub):
    store, parts = hub["store"], hub["parts"]
    hub["hub"].files[(REPO, PARTS[2])].drop_after = 1_600_000  # a dropped connection too
    cancel = threading.Event()

    def cancel_in_part_two(p):
        if p.phase == "download" and p.done_bytes > len(parts[0]) + 500_000:
            cancel.set()

    with pytest.raises(Cancelled):
        pull(REF, store=store, on_progress=cancel_in_part_two, cancel=cancel)
    assert store.list() == []  # a half set is never listed
    work = store.paths.partial / "big-Q8_0" / "files"
    assert (work / PARTS[0]).read_bytes() == parts[0]
    kept = (work / f"{PARTS[1]}.part").stat().st_size
    assert 500_000 < kept < len(parts[1])
    before = len(part_gets(hub["hub"]))
    model = pull(REF, store=store)
    assert [(model.path.parent / n).read_bytes() for n in PARTS] == parts
    again = part_gets(hub["hub"])[before:]
    assert PARTS[0] not in [name for name, _ in again]  # verified before: not fetched again
    assert again[0] == (PARTS[1], f"bytes={kept}-")
    assert [rng for name, rng in again if name == PARTS[2]][1].startswith("bytes=")


def test_a_corrupted_part_is_rejected_by_name_and_only_it_comes_again(hub):
    store, parts = hub["store"], hub["parts"]
    hub["hub"].files[(REPO, PARTS[1])].corrupt = True
    with pytest.raises(ChecksumError, match=f"checksum mismatch for {PARTS[1]} from {REPO}"):
        pull(REF, store=store)
    assert store.list() == []
    assert not list(store.paths.models.glob("someone/*/*.gguf"))  # nothing installed
    work = store.paths.partial / "big-Q8_0" / "files"
    assert (work / PARTS[0]).read_bytes() == parts[0]  # verified: kept
    assert not (work / PARTS[1]).exists() and not (work / f"{PARTS[1]}.part").exists()
    hub["hub"].files[(REPO, PARTS[1])].corrupt = False
    before = len(part_gets(hub["hub"]))
    model = pull(REF, store=store)
    assert [name for name, _ in part_gets(hub["hub"])[before:]] == PARTS[1:]
    assert model.size_bytes == sum(len(d) for d in parts)


def test_without_pinned_hashes_each_part_is_checked_against_the_hubs(hub, monkeypatch):
    monkeypatch.setenv("EMBER_REGISTRY",
                       str(split_registry(hub["tmp"], hub["parts"], pinned=False)))
    hub["hub"].files[(REPO, PARTS[2])].corrupt = True
    with pytest.raises(ChecksumError, match=f"checksum mismatch for {PARTS[2]}"):
        pull(REF, store=hub["store"])
    assert hub["store"].list() == []


def test_a_part_missing_on_the_server_is_named(hub):
    del hub["hub"].files[(REPO, PARTS[2])]
    with pytest.raises(DownloadError, match=rf"{REPO}/{PARTS[2]} not found on the hub "
                                            r"\(HTTP 404\)"):
        pull(REF, store=hub["store"])
    assert hub["store"].list() == []


def test_free_space_is_checked_for_the_whole_set_before_any_part(hub, full_disk):
    total = sum(len(d) for d in hub["parts"])
    with pytest.raises(DownloadError, match=f"not enough disk space .*need {total / 1e9:.2f} GB"):
        pull(REF, store=hub["store"])
    assert part_gets(hub["hub"]) == []


def test_the_fit_sizes_gpt_oss_120b_by_all_its_parts():
    spec = load_registry().get("gpt-oss-120b")
    variant = spec.variant("MXFP4")
    weights = sum(f.size_bytes for f in variant.files)
    assert variant.size_bytes == weights > 60e9
    small, big = (fits_for(spec, desktop(ram_total=n * 2**30, ram_available=(n - 4) * 2**30))
                  for n in (32, 128))
    assert [f.placement for f in small] == ["wont_fit"]  # a third of it would fit
    assert [f.placement for f in big] == ["cpu"] and big[0].memory.weights >= weights
