"""Saved KV caches on disk (backends/llamacpp/kv_store.py): a file is found by its key and
token prefix, written whole, and dropped with a log line when it is damaged, truncated or
changed; the folder stays under its size limit, least recently used out first."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from backends.llamacpp.kv_store import KvStore, StoreKey, read_header

KEY = StoreKey(model_sha256="ab" * 32, context=4096, kv_cache="f16", gpu_layers=0,
               llama_version="0.3.36")
PAYLOAD = bytes(range(256)) * 40


def test_a_saved_cache_is_found_by_the_longest_shared_prefix_and_loads_whole(tmp_path: Path):
    store = KvStore(tmp_path, KEY)
    store.save(list(range(1000)), PAYLOAD)
    store.save([7] * 600, PAYLOAD[::-1])
    again = KvStore(tmp_path, KEY)  # a new load: only the files
    entry, shared = again.best(list(range(900)) + [5, 5])
    assert entry is not None and shared == 900 and len(entry.tokens) == 1000
    assert again.load(entry) == PAYLOAD
    entry, shared = again.best([7] * 600)
    assert entry is not None and shared == 599  # short of the last token, whose logits count
    assert again.best([1, 2, 3]) == (None, 0)


def test_a_cache_saved_under_other_settings_is_not_offered(tmp_path: Path):
    KvStore(tmp_path, KEY).save(list(range(500)), PAYLOAD)
    for other in (StoreKey(KEY.model_sha256, 8192, "f16", 0, "0.3.36"),
                  StoreKey(KEY.model_sha256, 4096, "q8_0", 0, "0.3.36"),
                  StoreKey("cd" * 32, 4096, "f16", 0, "0.3.36")):
        assert KvStore(tmp_path, other).best(list(range(500))) == (None, 0)
    path = next(tmp_path.glob("*.kv"))
    with pytest.raises(ValueError, match="other settings"):
        read_header(path, StoreKey(KEY.model_sha256, 4096, "f16", 99, "0.3.36"))


def test_a_truncated_file_is_dropped_and_logged(tmp_path: Path, caplog):
    entry = KvStore(tmp_path, KEY).save(list(range(500)), PAYLOAD)
    with entry.path.open("r+b") as f:
        f.truncate(entry.path.stat().st_size - 10)
    with caplog.at_level(logging.WARNING, "backends.llamacpp.kv_store"):
        assert KvStore(tmp_path, KEY).best(list(range(500))) == (None, 0)
    assert not entry.path.exists()
    assert "payload bytes" in caplog.text and entry.path.name in caplog.text


def test_a_damaged_payload_is_dropped_when_loaded_never_returned(tmp_path: Path, caplog):
    entry = KvStore(tmp_path, KEY).save(list(range(500)), PAYLOAD)
    with entry.path.open("r+b") as f:
        f.seek(entry.data_at + 100)
        f.write(b"\xff\xfe")
    store = KvStore(tmp_path, KEY)
    found, _ = store.best(list(range(500)))
    assert found is not None  # the header is whole: only the checksum tells
    with caplog.at_level(logging.WARNING, "backends.llamacpp.kv_store"):
        assert store.load(found) is None
    assert "checksum" in caplog.text and not entry.path.exists()
    assert store.best(list(range(500))) == (None, 0)


def test_a_file_that_is_not_a_saved_cache_is_dropped(tmp_path: Path, caplog):
    junk = tmp_path / f"{KEY.digest()}-0000.kv"
    junk.write_bytes(b"hello, not a cache")
    with caplog.at_level(logging.WARNING, "backends.llamacpp.kv_store"):
        assert KvStore(tmp_path, KEY).entries() == []
    assert "bad magic" in caplog.text and not junk.exists()


def test_writes_leave_no_temporary_files_and_a_later_turn_replaces_the_earlier(
        tmp_path: Path):
    store = KvStore(tmp_path, KEY)
    first = store.save(list(range(400)), PAYLOAD)
    second = store.save(list(range(700)), PAYLOAD)  # the same conversation, one turn on
    assert sorted(p.name for p in tmp_path.iterdir()) == [second.path.name]
    assert not first.path.exists() and store.entries() == [second]


def test_the_folder_stays_under_its_limit_least_recently_used_out_first(tmp_path: Path):
    size = len(PAYLOAD) + 4000  # a file: its payload and a header of a few hundred tokens
    store = KvStore(tmp_path, KEY, max_bytes=3 * size)
    a = store.save([1] * 300, PAYLOAD)
    b = store.save([2] * 300, PAYLOAD)
    c = store.save([3] * 300, PAYLOAD)
    for i, entry in enumerate((a, b, c)):  # a, then b, then c; then a is used again
        os.utime(entry.path, (1000 + i, 1000 + i))
    assert store.load(a) == PAYLOAD
    d = store.save([4] * 300, PAYLOAD)
    assert {e.path for e in store.entries()} == {a.path, c.path, d.path}
    assert not b.path.exists()


def test_tokens_restored_from_disk_show_in_openai_usage_and_the_metrics():
    from app.server.metrics import Metrics
    from app.server.openai.wire import usage
    from backends.base import Stats

    stats = Stats(prompt_tokens=2100, completion_tokens=8, ttft_s=0.2,
                  decode_tokens_per_s=30.0, finish_reason="stop", truncated=False,
                  total_s=0.5, cached_tokens=2000, disk_tokens=1990)
    details = usage(stats).prompt_tokens_details
    assert details is not None and (details.cached_tokens, details.disk_tokens) == (2000, 1990)
    metrics = Metrics()
    metrics.record("chat", "m", stats, 0.5)
    assert "ember_disk_prompt_tokens_total 1990" in metrics.render(0, 0, [])


def test_the_runtime_names_the_data_folders_kv_cache_and_its_size_in_llamacpp_plans(
        isolated_home, tmp_path: Path, monkeypatch):
    """Only the llama.cpp backend saves its caches: its plans name the folder and the size;
    another backend's plan is the fit model's own."""
    from app.hardware import HardwareProfile
    from app.runtime import Runtime
    from app.store import InstalledModel
    from tests.support.vision_store import install_tiny_vision
    from tests.unit.test_mlx_store_fit import make_mlx_dir

    monkeypatch.delenv("EMBER_KV_CACHE_GB", raising=False)
    store, gguf_model, _ = install_tiny_vision(isolated_home.home)
    mlx_model = InstalledModel("m", "4bit", "mlx", make_mlx_dir(tmp_path / "m"), 0, "",
                               "qwen2", 32768, True, "converted", 0.0)
    cpu = HardwareProfile(os="Linux", machine="x86_64", cpu="x", physical_cores=2,
                          logical_cores=2, isa=("avx2",), ram_total=16 << 30,
                          ram_available=8 << 30, gpus=(), cpu_bandwidth_gbps=20)
    runtime = Runtime(store=store, hardware=cpu)
    plan = runtime._plan(gguf_model, 2048, "llamacpp")
    assert plan.kv_store == str(isolated_home.home / "kv-cache")
    assert plan.kv_store_bytes == 4 << 30
    assert runtime._plan(mlx_model, 2048, "mlx").kv_store is None
    monkeypatch.setenv("EMBER_KV_CACHE_GB", "0")  # saving off
    assert runtime._plan(gguf_model, 2048, "llamacpp").kv_store is None

