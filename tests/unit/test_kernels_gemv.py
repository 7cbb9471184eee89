"""kernels/gemv_triton.py, the 1-16 row int8/int4 GEMV, in Triton's interpreter against
kernels.matmul.linear_reference, and its tuning file (kernels/gemv_config.py): written by a
sweep, read back, ignored when damaged. The compiled kernel and its bf16 path are checked on
a GPU (tests/gpu/test_kernels_gpu.py); the interpreter's bf16 is not faithful."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from app.config import paths
from kernels.gemv_config import (
    GemvConfig,
    TuneKey,
    TuningFile,
    config_space,
    default_config,
    default_tuning_file,
    row_bucket,
)
from kernels.matmul import linear, linear_reference
from kernels.quant import quantize
from tests.support.kernel_cases import close, triton_interpreter, weights

MODULES = ("kernels.gemv_triton",)


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    with triton_interpreter(MODULES):
        yield


def packed(kind: str, n: int, k: int):
    quant, _, group = kind.partition("/")
    return quantize(weights(n, k, seed=n + k), quant, int(group) if group else None)


# (kind, rows, N, K, config): N and K no multiple of the blocks; split-K off (1) and on (3:
# the last split shorter); steps inside one group (int4 /128 with block_k 64, int8 /32 with
# 32) and steps across groups (block_k 128 over /32: a scale per weight)
CASES = [
    ("int4", 1, 200, 384, GemvConfig(64, 64, 1)),
    ("int4", 3, 200, 384, GemvConfig(64, 64, 3)),
    ("int4", 16, 72, 384, GemvConfig(32, 128, 2)),
    ("int4/32", 3, 40, 352, GemvConfig(32, 128, 1)),
    ("int4/32", 1, 40, 352, GemvConfig(16, 32, 3)),
    ("int8", 1, 200, 300, GemvConfig(64, 64, 1)),
    ("int8", 3, 200, 300, GemvConfig(64, 64, 3)),
    ("int8", 16, 72, 300, GemvConfig(32, 32, 2)),
    ("int8/32", 3, 40, 352, GemvConfig(32, 128, 2)),
    ("int8/32", 16, 40, 352, GemvConfig(16, 32, 1)),
]


@pytest.mark.parametrize("kind,rows,n,k,config", CASES)
def test_gemv_equals_reference(kind, rows, n, k, config):
    from kernels.gemv_triton import gemv

    w = packed(kind, n, k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
    out = gemv(x, w, config)
    assert out.shape == (rows, n) and out.dtype == torch.float32
    close(out, linear_reference(x, w), 1e-5)


@pytest.mark.parametrize("kind", ["int4", "int8"])
def test_gemv_in_float16_with_the_default_config(kind):
    from kernels.gemv_triton import gemv

    w = packed(kind, 96, 256)
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(2))
    out = gemv(x.half(), w)
    assert out.dtype == torch.float16
    close(out, linear_reference(x, w), 3e-3)


def test_split_k_gives_the_same_sums_as_one_pass():
    from kernels.gemv_triton import gemv

    w = packed("int4", 64, 1024)
    x = torch.randn(1, 1024, generator=torch.Generator().manual_seed(5))
    one = gemv(x, w, GemvConfig(64, 128, 1))
    four = gemv(x, w, GemvConfig(64, 128, 4))
    torch.testing.assert_close(four, one, rtol=1e-5, atol=1e-5)
    assert not torch.equal(one, torch.zeros_like(one))


def test_gemv_names_what_it_cannot_take():
    from kernels.gemv_triton import gemv

    w = packed("int8", 32, 64)
    with pytest.raises(ValueError, match="1-16 rows, got 17"):
        gemv(torch.zeros(17, 64), w)
    with pytest.raises(ValueError, match="x has 48 columns, the weight expects 64"):
        gemv(torch.zeros(1, 48), w)
    with pytest.raises(ValueError, match="power of two"):
        GemvConfig(96, 64, 1)


def test_the_dispatch_sends_up_to_16_rows_to_the_gemv_and_more_to_the_gemm(monkeypatch):
    import kernels.gemv_triton as gemv_module

    monkeypatch.setenv("EMBER_KERNELS", "triton")
    w = packed("int4", 40, 128)
    calls = []
    real = gemv_module.gemv
    monkeypatch.setattr(gemv_module, "gemv", lambda x, w: calls.append(x.shape) or real(x, w))
    x = torch.randn(2, 8, 128, generator=torch.Generator().manual_seed(1))
    close(linear(x, w), linear_reference(x, w), 1e-5)  # 16 rows
    close(linear(x[:, :1], w), linear_reference(x[:, :1], w), 1e-5)  # 2 rows
    close(linear(torch.cat([x, x[:, :1]], 1), w),
          linear_reference(torch.cat([x, x[:, :1]], 1), w), 1e-5)  # 18 rows: the GEMM
    assert calls == [(16, 128), (2, 128)]


# -- configs and the tuning file ------------------------------------------------------------
def test_row_buckets_and_configs_keep_steps_inside_a_group():
    assert [row_bucket(m) for m in (1, 2, 3, 5, 9, 16)] == [1, 2, 4, 8, 16, 16]
    with pytest.raises(ValueError, match="1-16 rows, got 0"):
        row_bucket(0)
    for m in (1, 3, 16):
        space = config_space("int4", m, 4096, 4096, 128, 132)
        assert space and all(128 % c.block_k == 0 for c in space)
        assert 128 % default_config("int4", m, 4096, 4096, 128, 132).block_k == 0
        assert all(32 % c.block_k == 0 for c in config_space("int8", m, 4096, 4096, 32, 132))
    # N = 1024 (k/v) is 8 tiles of 128: split until the 132 SMs all have a program
    assert default_config("int4", 1, 1024, 4096, 128, 132).split_k == 16
    assert default_config("int4", 1, 28672, 4096, 128, 132).split_k == 1


def test_the_tuning_file_lives_in_embers_data_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_HOME", str(tmp_path))
    monkeypatch.delenv("EMBER_KERNEL_TUNING", raising=False)
    assert default_tuning_file() == paths().kernel_tuning
    monkeypatch.setenv("EMBER_KERNEL_TUNING", str(tmp_path / "elsewhere.json"))
    assert default_tuning_file() == tmp_path / "elsewhere.json"


def test_a_sweep_writes_its_winner_and_a_new_process_reads_it_back(tmp_path):
    from kernels.gemv_triton import tune, tune_key

    w = packed("int4", 40, 256)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(3))
    space = [GemvConfig(64, 128, 1), GemvConfig(16, 32, 2)]
    path = tmp_path / "cache" / "kernel-tuning.json"
    best, timings = tune(x, w, TuningFile(path), space)
    assert best in space and [c for c, _ in timings] == space
    assert all(s > 0 for _, s in timings)
    key = tune_key(x, w)
    assert key == TuneKey("cpu", "int4", 4, 40, 256, 128)
    doc = json.loads(path.read_text())
    assert doc["version"] == 1 and doc["gemv"][key.text()]["block_k"] == best.block_k
    assert TuningFile(path).get(key) == best  # a second start reads, does not re-tune


def test_a_damaged_tuning_file_is_ignored_then_replaced(tmp_path, caplog):
    path = tmp_path / "kernel-tuning.json"
    key = TuneKey("NVIDIA H200", "int8", 1, 4096, 4096, 4096)
    good = GemvConfig(256, 64, 4, 8, 4)
    for text in ("{not json", json.dumps({"version": 99, "gemv": {}}), "\xff\xfe"):
        path.write_text(text, encoding="latin-1")
        with caplog.at_level(logging.WARNING, logger="ember.kernels"):
            assert TuningFile(path).get(key) is None
        assert "ignoring" in caplog.text
        caplog.clear()
    # one bad entry does not spoil the others
    path.write_text(json.dumps({"version": 1, "gemv": {
        key.text(): vars(good), "x|int4|m1|n1|k1|g1": {"block_n": 96}}}))
    with caplog.at_level(logging.WARNING, logger="ember.kernels"):
        tuning = TuningFile(path)
        assert tuning.get(key) == good and len(tuning.entries()) == 1
    assert "bad entry" in caplog.text
    path.write_text("{not json")
    tuning = TuningFile(path)
    tuning.put(key, good)
    assert TuningFile(path).get(key) == good
