"""The Triton kernels compiled for an NVIDIA GPU, against their plain-torch references: the
int8/int4 matmul (GEMV and GEMM tilings, Llama-3-8B's shapes too) and the 1-16 row GEMV
(kernels/gemv_triton.py: its configs, split-K, the tuning file, a CUDA graph) in float32,
bfloat16 and float16, and the paged-attention decode over long contexts, grouped-query
heads and sliding windows. The CPU tier runs the same kernels in Triton's interpreter
(tests/unit/test_kernels.py), which cannot check bfloat16 or the compiled code.

This tier is collected only on a machine with an NVIDIA GPU (tests/conftest.py); run it
with `bash benchmarks/gpu_checks.sh`."""

from __future__ import annotations

import os

import pytest
import torch

from kernels.matmul import linear, linear_reference
from kernels.paged_attention import paged_decode_reference, paged_verify_reference
from kernels.quant import quantize
from tests.support.kernel_cases import close, paged_case, verify_case, weights

if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
    raise RuntimeError("tests/gpu needs a CUDA device and compiled Triton kernels "
                       "(TRITON_INTERPRET unset)")

from kernels.gemv_config import GemvConfig, TuningFile, config_space
from kernels.gemv_triton import gemv, num_sms, tune, tune_key
from kernels.matmul_triton import matmul
from kernels.paged_attention_triton import paged_decode, paged_verify

CUDA = torch.device("cuda")
KINDS = ["int8", "int8/32", "int4", "int4/32"]
# (rows, N, K): GEMV (1-16 rows, split-K) and GEMM tilings, N no multiple of the tiles
SMALL = [(1, 200, 384), (16, 72, 896), (5, 40, 128), (17, 200, 384), (70, 130, 256)]
# Llama-3-8B: gate/up at decode, down at a prefill chunk, the output head at decode
LLAMA = [(1, 14336, 4096), (64, 4096, 14336), (1, 128256, 4096)]
# worst error against a float32 reference, relative to the output's largest magnitude
RTOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 3e-3}


def packed(kind: str, n: int, k: int):
    quant, _, group = kind.partition("/")
    return quantize(weights(n, k, seed=n + k).to(CUDA), quant, int(group) if group else None)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows,n,k", SMALL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_matmul_equals_reference(kind, rows, n, k, dtype):
    w = packed(kind, n, k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)).to(CUDA)
    out = matmul(x.to(dtype), w)
    assert out.dtype == dtype
    close(out, linear_reference(x, w), RTOL[dtype])


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("rows,n,k", LLAMA)
def test_compiled_matmul_at_llama_3_8b_shapes_in_bfloat16(kind, rows, n, k):
    w = packed(kind, n, k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)).to(CUDA)
    close(matmul(x.bfloat16(), w), linear_reference(x, w), RTOL[torch.bfloat16])


def test_compiled_matmul_in_float16_and_the_dispatch_with_bias():
    w = packed("int4", 96, 256)
    x, bias = torch.randn(2, 3, 256, device=CUDA), torch.randn(96, device=CUDA)
    out = linear(x.half(), w, bias.half())  # CUDA tensors dispatch to Triton by default
    assert out.shape == (2, 3, 96) and out.dtype == torch.float16
    close(out, linear_reference(x, w) + bias, RTOL[torch.float16])


def test_split_k_partial_sums_add_up_in_a_fixed_order():
    """Split-K adds its partial sums with a reduction, not atomics: the same call gives the
    same bits every time."""
    w = packed("int4", 4096, 4096)
    x = torch.randn(1, 4096, device=CUDA, dtype=torch.bfloat16)
    first = matmul(x, w)
    assert all(torch.equal(first, matmul(x, w)) for _ in range(5))


# -- the 1-16 row GEMV (kernels/gemv_triton.py) ---------------------------------------------
GEMV_SMALL = [(1, 200, 384), (3, 72, 896), (16, 40, 128), (8, 1000, 4096)]
GEMV_CONFIGS = [None, GemvConfig(64, 32, 1), GemvConfig(256, 128, 3, 8, 4),
                GemvConfig(32, 64, 2, 2, 1)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows,n,k", GEMV_SMALL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_compiled_gemv_equals_reference(kind, rows, n, k, dtype):
    w = packed(kind, n, k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)).to(CUDA)
    ref = linear_reference(x, w)
    for config in GEMV_CONFIGS:
        out = gemv(x.to(dtype), w, config)
        assert out.dtype == dtype
        close(out, ref, RTOL[dtype])


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("rows", [1, 16])
@pytest.mark.parametrize("n,k", [(1024, 4096), (6144, 4096), (4096, 14336), (28672, 4096),
                                 (128256, 4096)])
def test_compiled_gemv_at_llama_3_8b_shapes_in_bfloat16(kind, rows, n, k):
    w = packed(kind, n, k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)).to(CUDA)
    close(gemv(x.bfloat16(), w), linear_reference(x, w), RTOL[torch.bfloat16])


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_every_config_of_the_sweep_space_compiles_and_is_right(kind):
    w = packed(kind, 1024, 4096)
    x = torch.randn(4, 4096, generator=torch.Generator().manual_seed(4)).to(CUDA)
    ref = linear_reference(x, w)
    space = config_space(kind, 4, 1024, 4096, w.group_size, num_sms(CUDA))
    for config in space:
        close(gemv(x.bfloat16(), w, config), ref, RTOL[torch.bfloat16])


def test_compiled_gemv_split_k_gives_the_same_bits_every_call():
    w = packed("int4", 1024, 4096)
    x = torch.randn(1, 4096, device=CUDA, dtype=torch.bfloat16)
    config = GemvConfig(64, 128, 8)
    first = gemv(x, w, config)
    assert all(torch.equal(first, gemv(x, w, config)) for _ in range(5))


def test_the_gpu_sweep_writes_the_tuning_file_and_the_next_choice_reads_it(tmp_path):
    w = packed("int4", 4096, 4096)
    x = torch.randn(1, 4096, device=CUDA, dtype=torch.bfloat16)
    tuning = TuningFile(tmp_path / "kernel-tuning.json")
    space = [GemvConfig(128, 128, 4), GemvConfig(256, 64, 8, 8, 4)]
    best, timings = tune(x, w, tuning, space)
    assert len(timings) == 2 and all(0 < s < 1e-2 for _, s in timings)
    key = tune_key(x, w)
    assert key.device == torch.cuda.get_device_name() and key.rows == 1
    assert TuningFile(tuning.path).get(key) == best


def test_the_dispatch_runs_the_gemv_inside_a_cuda_graph(monkeypatch):
    """Capture never sweeps (no timing inside a capture), even with EMBER_GEMV_TUNE=1."""
    w = packed("int8", 512, 1024)
    x = torch.randn(2, 1024, device=CUDA, dtype=torch.bfloat16)
    warm = linear(x, w)  # compiles the default config outside the capture
    monkeypatch.setenv("EMBER_GEMV_TUNE", "1")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = linear(x, w)
    x.copy_(torch.randn_like(x))
    graph.replay()
    close(out, linear_reference(x.float(), w), RTOL[torch.bfloat16])
    assert not torch.equal(out, warm)


def on_gpu(args, dtype: torch.dtype | None = None):
    return [a.to(CUDA, dtype) if dtype is not None and a.is_floating_point() else a.to(CUDA)
            for a in args]


@pytest.mark.parametrize("heads,kv_heads,dim", [(4, 4, 64), (8, 2, 64), (16, 2, 64),
                                                (32, 8, 128)])  # the last: Llama-3-8B's
@pytest.mark.parametrize("lens", [[16, 32, 1], [17, 33, 2], [256, 257, 300],
                                  [3000, 1, 700]])  # 12 partitions of 256 to merge
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_paged_decode_equals_reference(heads, kv_heads, dim, lens, dtype):
    args = paged_case(lens, heads, kv_heads, dim, seed=len(lens) + heads)
    ref = paged_decode_reference(*on_gpu(args), scale=dim ** -0.5)
    out = paged_decode(*on_gpu(args, dtype), scale=dim ** -0.5)
    assert out.dtype == dtype
    close(out, ref, RTOL[dtype])


@pytest.mark.parametrize("window", [1, 40, 256, 1024])
def test_compiled_paged_decode_with_a_sliding_window(window):
    args = on_gpu(paged_case([1, 39, 40, 41, 300, 2000], 8, 2, 64, seed=window))
    close(paged_decode(*args, scale=0.125, window=window),
          paged_decode_reference(*args, scale=0.125, window=window), RTOL[torch.float32])


@pytest.mark.parametrize("dim,dtype", [(80, torch.float32), (256, torch.bfloat16),
                                       (128, torch.float16)])
def test_compiled_paged_decode_head_sizes(dim, dtype):
    args = paged_case([20, 47, 513], 8, 1, dim)
    out = paged_decode(*on_gpu(args, dtype), scale=dim ** -0.5)
    close(out, paged_decode_reference(*on_gpu(args), scale=dim ** -0.5), RTOL[dtype])


@pytest.mark.parametrize("heads,kv_heads,dim", [(8, 8, 64), (32, 8, 128)])  # GQA 1; Llama-3-8B
@pytest.mark.parametrize("rows", [1, 2, 5, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_paged_verify_equals_reference(heads, kv_heads, dim, rows, dtype):
    """Verification rows (causal within the proposals, padded rows 0), sequences of
    different lengths and row counts in one launch, long enough to merge partitions."""
    lens, n_rows = [3000, 17, 260, 48], [rows, 1, max(1, rows - 1), min(rows, 3)]
    args = verify_case(lens, n_rows, rows, heads, kv_heads, dim, seed=rows + heads)
    ref = paged_verify_reference(*on_gpu(args), scale=dim ** -0.5)
    out = paged_verify(*on_gpu(args, dtype), scale=dim ** -0.5)
    assert out.dtype == dtype
    close(out, ref, RTOL[dtype])


@pytest.mark.parametrize("window", [1, 40, 1024])
def test_compiled_paged_verify_with_a_sliding_window(window):
    args = on_gpu(verify_case([39, 300, 2000], [5, 9, 2], 9, 8, 2, 64, seed=window))
    close(paged_verify(*args, scale=0.125, window=window),
          paged_verify_reference(*args, scale=0.125, window=window), RTOL[torch.float32])
