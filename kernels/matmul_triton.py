"""Weight-only int8/int4 matmul in Triton: y = x @ W^T with W packed as in `kernels.quant`.

One kernel, two launch shapes:
- GEMV (1-16 rows: decode, speculative verification): one 16-row tile of x, split-K so that
  a small N still fills the GPU (partial sums in float32, added in a fixed order afterwards,
  so results do not depend on timing as atomics would).
- GEMM (prefill): 64 x 128 output tiles, grouped along M so that tiles sharing a weight
  panel run together and find it in L2.

Each K-tile of the weight is dequantized in registers (float32, then the activation dtype)
and fed to `tl.dot` with float32 accumulation; an int4 tile is read as BLOCK_K / 8 rows of
words, each word once. The block sizes are reasoned, not tuned: this
file runs under TRITON_INTERPRET=1 on a CPU (tests/unit/test_kernels.py) and compiled on an
NVIDIA GPU (tests/gpu/test_kernels_gpu.py).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.quant import Int4Weight, Int8Weight, PackedWeight

GEMV_MAX_ROWS = 16
GEMV_BLOCKS = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128)
GEMM_BLOCKS = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64)
MIN_K_PER_SPLIT = 512  # below this a split's loop is too short to hide the load latency


# Triton reads a kernel's parameter annotations as type specializations (triton/runtime/
# jit.py, KernelParam.annotation), so its parameters stay unannotated.
@triton.jit
def _matmul_kernel(x_ptr, q_ptr, s_ptr, z_ptr, out_ptr, M, N, K, k_per_split,  # type: ignore[no-untyped-def]
                   BITS: tl.constexpr, GROUP: tl.constexpr, TILE_IN_GROUP: tl.constexpr,
                   PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # program -> output tile, grouped along M (GROUP_M row-tiles per weight panel)
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    split = tl.program_id(1)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok, n_ok = offs_m < M, offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_lo = split * k_per_split
    # stop at K: a tile wholly past K would read a scale row that does not exist
    for k0 in range(k_lo, min(k_lo + k_per_split, K), BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        x = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :],
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        mask = k_ok[:, None] & n_ok[None, :]
        if TILE_IN_GROUP:  # the whole K-tile lies in one group: one row of scales
            g = k0 // GROUP
            s = tl.load(s_ptr + g * N + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        else:
            g2 = (offs_k // GROUP)[:, None] * N + offs_n[None, :]
            s = tl.load(s_ptr + g2, mask=mask, other=0.0).to(tl.float32)
        if BITS == 8:  # int8 (N, K), row-major
            # int64: N * K passes 2**31 for a large vocabulary head (256k x 8192)
            q = tl.load(q_ptr + offs_n.to(tl.int64)[None, :] * K + offs_k[:, None], mask=mask,
                        other=0)
            w = q.to(tl.float32) * s
        else:  # int32 (K // 8, N): nibble k % 8 of word k // 8
            # each word is loaded once, (BLOCK_K / 8, BLOCK_N), and spread to its 8 rows in
            # registers: row 8p + j of the reshape is nibble j of word row p
            # (not named `rows`: compiled Triton keeps one type per name across the loop)
            word_rows = k0 // 8 + tl.arange(0, BLOCK_K // 8)
            words = tl.load(q_ptr + word_rows[:, None] * N + offs_n[None, :],
                            mask=(word_rows < K // 8)[:, None] & n_ok[None, :], other=0)
            nibbles = (words[:, None, :] >> (tl.arange(0, 8) * 4)[None, :, None]) & 0xF
            q = tl.reshape(nibbles, (BLOCK_K, BLOCK_N))
            if TILE_IN_GROUP:
                z = tl.load(z_ptr + g * N + offs_n, mask=n_ok, other=0.0)
                z = z.to(tl.float32)[None, :]
            else:
                z = tl.load(z_ptr + g2, mask=mask, other=0.0).to(tl.float32)
            w = q.to(tl.float32) * s + z
        acc = tl.dot(x, w.to(x.dtype), acc, input_precision=PRECISION)
    out = out_ptr + split * M * N + offs_m[:, None] * N + offs_n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@functools.cache
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # an H100's, for launches under the interpreter


def gemv_splits(n: int, k: int, device: torch.device) -> int:
    """Split K until about two programs per SM run, keeping each split's loop long."""
    tiles = triton.cdiv(n, GEMV_BLOCKS["BLOCK_N"])
    want = triton.cdiv(2 * _num_sms(device), tiles)
    return max(1, min(want, k // MIN_K_PER_SPLIT))


def matmul(x: torch.Tensor, w: PackedWeight, split_k: int | None = None) -> torch.Tensor:
    """x (M, K) contiguous, float32/float16/bfloat16 -> (M, N) in x's dtype. GEMV tiling for
    M <= 16 (split-K: `split_k` or `gemv_splits`), GEMM tiling above."""
    m, k = x.shape
    n, wk = w.shape
    if wk != k:
        raise ValueError(f"x has {k} columns, the weight expects {wk}")
    gemv = m <= GEMV_MAX_ROWS
    blocks = GEMV_BLOCKS if gemv else GEMM_BLOCKS
    bk = blocks["BLOCK_K"]
    splits = (split_k or gemv_splits(n, k, x.device)) if gemv else 1
    k_per_split = triton.cdiv(triton.cdiv(k, splits), bk) * bk
    splits = triton.cdiv(k, k_per_split)
    out = (torch.empty(m, n, device=x.device, dtype=x.dtype) if splits == 1 else
           torch.empty(splits, m, n, device=x.device, dtype=torch.float32))
    bits = 8 if isinstance(w, Int8Weight) else 4
    zeros = w.zeros if isinstance(w, Int4Weight) else w.scales  # unused for int8
    grid = (triton.cdiv(m, blocks["BLOCK_M"]) * triton.cdiv(n, blocks["BLOCK_N"]), splits)
    _matmul_kernel[grid](
        x, w.qweight, w.scales, zeros, out, m, n, k, k_per_split,
        BITS=bits, GROUP=w.group_size, TILE_IN_GROUP=w.group_size % bk == 0 or w.group_size == k,
        PRECISION="ieee" if x.dtype == torch.float32 else "tf32", GROUP_M=8,
        num_warps=4, num_stages=4 if gemv else 3, **blocks)
    return out if splits == 1 else out.sum(0).to(x.dtype)
