"""Weight-only int8/int4 GEMV for 1-16 rows (decode, speculative verification) in Triton,
written for the memory system rather than around `tl.dot` (kernels.matmul_triton keeps the
GEMM tiling for larger batches).

- One program owns `block_n` outputs for all M rows (BLOCK_M = M rounded up to a power of
  two), so each weight byte is read once whatever M is; the activations (M x K, a few KB) are
  re-read from L1/L2 and kept there (`evict_last`), the weights streamed (`evict_first`), as
  GemLite's GEMV does.
- int4 (GPTQ words, int32 (K // 8, N)): a step loads `block_k / 8` word rows x `block_n`
  contiguous words, and unpacks them in registers one nibble plane at a time
  (`(words >> 4j) & 15`, j = 0..7, against the activations at k = 8p + j): no 3-D reshape
  and no layout change of the weight tile, the suspect in the old kernel's 6-21%.
- Scales and zeros are read once per step (a step never crosses a group: the config keeps
  `block_k` a divisor of the group) and applied once per output, not per weight, with
  llama.cpp's Q4_1 identity: sum_k x_k (q_k s + z) = s * sum_k x_k q_k + z * sum_k x_k.
  Per-channel int8 scales are applied once after the K loop (gpt-fast's form).
- The product is a broadcast multiply and a sum along K (CUDA-core FMAs, float32): at 1-16
  rows a GEMV is bound by bytes, not FLOPs, and `tl.dot` would pad M to 16.
- Split-K (`split_k` programs along K) fills the SMs when N is small (k/v: N = 1024 is 8
  tiles of 128 for 132 SMs). Partial sums go to a float32 (split, M, N) buffer and a second
  launch adds them in a fixed order: results are the same bits on every call (greedy
  decoding with graphs on and off and speculative-equals-plain tests rely on it), bf16 has no
  native atomic add on every GPU, and the extra traffic is 2 x split x M x N x 4 bytes, under
  2% of the weight's bytes at Llama-3-8B's shapes with split 8. Atomics would save that one
  small launch (about 2 us, less inside a CUDA graph) at the cost of determinism.

Launch configurations (block sizes, split, warps, stages) come from kernels.gemv_config: a
fixed default on the CPU and under the interpreter; on a GPU the tuning file's winner, written
by `python -m kernels.tune` (Llama-3-8B's shapes) or, with `EMBER_GEMV_TUNE=1`, by a sweep the
first time the GPU meets a shape. The sweep is opt-in at run time because it compiles up to
~60 configs per layout and row bucket: its cost has not been measured on a GPU yet, and a
first start (or the GPU checks' 8 minutes) should not pay it unasked.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from kernels.gemv_config import (
    MAX_ROWS,
    GemvConfig,
    TuneKey,
    TuningFile,
    config_space,
    default_config,
    row_bucket,
)
from kernels.quant import Int4Weight, Int8Weight, PackedWeight

PER_CHANNEL, PER_STEP, PER_WEIGHT = 0, 1, 2  # where the scales apply (SCALES)
TUNE_ENV = "EMBER_GEMV_TUNE"


# Triton reads a kernel's parameter annotations as type specializations, so they stay
# unannotated (as in kernels.matmul_triton).
@triton.jit
def _gemv_kernel(x_ptr, q_ptr, s_ptr, z_ptr, out_ptr, M, N, K, k_per_split,  # type: ignore[no-untyped-def]
                 BITS: tl.constexpr, GROUP: tl.constexpr, SCALES: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_n = tl.max_contiguous(tl.multiple_of(offs_n, BLOCK_N), BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_lo = split * k_per_split
    for k0 in range(k_lo, min(k_lo + k_per_split, K), BLOCK_K):
        if BITS == 8:  # int8 (N, K) row-major: each output's K run is contiguous
            offs_k = k0 + tl.arange(0, BLOCK_K)
            k_ok = offs_k < K
            x = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :],
                        mask=m_ok[:, None] & k_ok[None, :], other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
            # int64: N * K passes 2**31 for a large vocabulary head
            q = tl.load(q_ptr + offs_n.to(tl.int64)[:, None] * K + offs_k[None, :],
                        mask=n_ok[:, None] & k_ok[None, :], other=0,
                        eviction_policy="evict_first").to(tl.float32)
            if SCALES == 2:  # groups shorter than a step: a scale per weight
                q = q * tl.load(s_ptr + (offs_k // GROUP)[None, :] * N + offs_n[:, None],
                                mask=n_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
            part = tl.sum(x[:, None, :] * q[None, :, :], axis=2)
            if SCALES == 1:
                s = tl.load(s_ptr + (k0 // GROUP) * N + offs_n, mask=n_ok, other=0.0)
                part = part * s.to(tl.float32)[None, :]
            acc += part
        else:  # int4: word p of output n holds k = 8p + j in bits 4j..4j+3
            offs_p = k0 // 8 + tl.arange(0, BLOCK_K // 8)
            p_ok = offs_p < K // 8
            words = tl.load(q_ptr + offs_p[:, None] * N + offs_n[None, :],
                            mask=p_ok[:, None] & n_ok[None, :], other=0,
                            eviction_policy="evict_first")
            xq = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            xsum = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for j in tl.static_range(8):
                xj = tl.load(x_ptr + offs_m[:, None] * K + (offs_p * 8 + j)[None, :],
                             mask=m_ok[:, None] & p_ok[None, :], other=0.0,
                             eviction_policy="evict_last").to(tl.float32)
                qj = ((words >> (4 * j)) & 0xF).to(tl.float32)
                if SCALES == 1:
                    xq += tl.sum(xj[:, :, None] * qj[None, :, :], axis=1)
                    xsum += tl.sum(xj, axis=1)
                else:  # groups shorter than a step: dequantize each weight
                    g = ((offs_p * 8 + j) // GROUP)[:, None] * N + offs_n[None, :]
                    wmask = p_ok[:, None] & n_ok[None, :]
                    sj = tl.load(s_ptr + g, mask=wmask, other=0.0).to(tl.float32)
                    zj = tl.load(z_ptr + g, mask=wmask, other=0.0).to(tl.float32)
                    xq += tl.sum(xj[:, :, None] * (qj * sj + zj)[None, :, :], axis=1)
            if SCALES == 1:
                g_row = (k0 // GROUP) * N + offs_n
                s = tl.load(s_ptr + g_row, mask=n_ok, other=0.0).to(tl.float32)
                z = tl.load(z_ptr + g_row, mask=n_ok, other=0.0).to(tl.float32)
                acc += xq * s[None, :] + xsum[:, None] * z[None, :]
            else:
                acc += xq
    if SCALES == 0:  # per-channel int8: one scale per output, after the whole K loop
        acc = acc * tl.load(s_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + split * M * N + offs_m[:, None] * N + offs_n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _sum_splits_kernel(part_ptr, out_ptr, size, splits,  # type: ignore[no-untyped-def]
                       BLOCK: tl.constexpr):
    """out[i] = part[0, i] + part[1, i] + ... in that order (float32), cast to out's dtype."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < size
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, splits):
        acc += tl.load(part_ptr + s * size + offs, mask=ok, other=0.0)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=ok)


def layout_of(w: PackedWeight) -> str:
    return "int8" if isinstance(w, Int8Weight) else "int4"


def _scales_mode(w: PackedWeight, block_k: int) -> int:
    n, k = w.shape
    if isinstance(w, Int8Weight) and w.scales.shape[0] == 1:
        return PER_CHANNEL
    return PER_STEP if w.group_size % block_k == 0 else PER_WEIGHT


def gemv(x: torch.Tensor, w: PackedWeight, config: GemvConfig | None = None) -> torch.Tensor:
    """x (M, K) contiguous with 1 <= M <= 16, float32/float16/bfloat16 -> (M, N) in x's
    dtype. `config` None: `choose_config` (default, tuning file, or a sweep on a GPU)."""
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError(f"the GEMV takes a contiguous (M, K) input, got shape "
                         f"{tuple(x.shape)}")
    m, k = x.shape
    n, wk = w.shape
    if wk != k:
        raise ValueError(f"x has {k} columns, the weight expects {wk}")
    if not 1 <= m <= MAX_ROWS:
        raise ValueError(f"the GEMV takes 1-{MAX_ROWS} rows, got {m}: use "
                         f"kernels.matmul_triton.matmul")
    config = config or choose_config(x, w)
    block_k = config.block_k
    k_per_split = triton.cdiv(triton.cdiv(k, config.split_k), block_k) * block_k
    splits = triton.cdiv(k, k_per_split)
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    part = out if splits == 1 else torch.empty(splits, m, n, device=x.device,
                                               dtype=torch.float32)
    zeros = w.zeros if isinstance(w, Int4Weight) else w.scales  # unused for int8
    grid = (triton.cdiv(n, config.block_n), splits)
    _gemv_kernel[grid](
        x, w.qweight, w.scales, zeros, part, m, n, k, k_per_split,
        BITS=8 if isinstance(w, Int8Weight) else 4, GROUP=w.group_size,
        SCALES=_scales_mode(w, block_k), BLOCK_M=row_bucket(m), BLOCK_N=config.block_n,
        BLOCK_K=block_k, num_warps=config.num_warps, num_stages=config.num_stages)
    if splits > 1:
        block = 1024
        _sum_splits_kernel[(triton.cdiv(m * n, block),)](part, out, m * n, splits,
                                                         BLOCK=block, num_warps=4)
    return out


# -- which config ---------------------------------------------------------------------------
@functools.cache
def num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # an H100's/H200's, for launches under the interpreter


@functools.cache
def _tuning_file() -> TuningFile:
    return TuningFile()


def tune_key(x: torch.Tensor, w: PackedWeight) -> TuneKey:
    n, k = w.shape
    device = torch.cuda.get_device_name(x.device) if x.is_cuda else "cpu"
    return TuneKey(device, layout_of(w), row_bucket(x.shape[0]), n, k, w.group_size)


# the choice per (device, layout, row bucket, N, K, group): decode asks it for every linear
# layer of every step (eagerly when graphs are off), so the device name, the defaults and
# the file are looked at once per shape; a default that a later sweep may replace is not kept
_chosen: dict[tuple, GemvConfig] = {}


def choose_config(x: torch.Tensor, w: PackedWeight) -> GemvConfig:
    """The default off a GPU or under the interpreter; on a GPU the tuning file's winner,
    else (EMBER_GEMV_TUNE=1, and not while a CUDA graph is being captured) a sweep whose
    winner goes to the file, else the default."""
    n, k = w.shape
    layout = layout_of(w)
    shape = (x.device, layout, row_bucket(x.shape[0]), n, k, w.group_size)
    if (chosen := _chosen.get(shape)) is not None:
        return chosen
    default = default_config(layout, x.shape[0], n, k, w.group_size, num_sms(x.device))
    if not x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":
        chosen = default
    elif (found := _tuning_file().get(tune_key(x, w))) is not None:
        chosen = found
    elif os.environ.get(TUNE_ENV) != "1":
        chosen = default
    elif torch.cuda.is_current_stream_capturing():
        return default  # no timing inside a capture: a later call outside may still sweep
    else:
        chosen = tune(x, w, _tuning_file())[0]
    _chosen[shape] = chosen
    return chosen


Timer = Callable[[Callable[[], object]], float]


def cuda_timer(fn: Callable[[], object]) -> float:
    """Median seconds of `fn` with the L2 flushed before each call (triton.testing.do_bench):
    decode reads weights from HBM, and a 4096 x 4096 int4 weight (8 MB) would otherwise sit
    in the H200's 60 MB L2."""
    from triton.testing import do_bench

    return do_bench(fn, warmup=5, rep=20, return_mode="median") / 1e3


def wall_timer(fn: Callable[[], object]) -> float:
    """Median seconds of 3 calls: for a sweep run off a GPU (the interpreter), where only the
    mechanism is under test, not the numbers."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[1]


def tune(x: torch.Tensor, w: PackedWeight, tuning: TuningFile,
         space: list[GemvConfig] | None = None, timer: Timer | None = None
         ) -> tuple[GemvConfig, list[tuple[GemvConfig, float]]]:
    """Time every config of `space` (default: kernels.gemv_config.config_space) on x and w,
    write the fastest to `tuning` under this device and shape, return it with every
    (config, seconds). A config that fails to compile or launch is left out."""
    n, k = w.shape
    if space is None:
        space = config_space(layout_of(w), x.shape[0], n, k, w.group_size, num_sms(x.device))
    timer = timer or (cuda_timer if x.is_cuda else wall_timer)
    timings: list[tuple[GemvConfig, float]] = []
    for config in space:
        try:
            gemv(x, w, config)  # compile outside the timing
            timings.append((config, timer(functools.partial(gemv, x, w, config))))
        except (triton.CompilationError, triton.OutOfResources, RuntimeError):
            continue
    if not timings:
        raise RuntimeError(f"no GEMV config of {len(space)} ran for {tune_key(x, w).text()}")
    best = min(timings, key=lambda t: t[1])[0]
    tuning.put(tune_key(x, w), best)
    return best, timings
