"""Paged-attention decode in Triton (flash-decoding), for one query row per sequence (a decode
step) or several (a speculative verification: the last token and its proposals, causal among
themselves), keys and values read straight from the paged cache through the block table.

One program per (sequence, kv head, partition of PARTITION tokens): it loads the queries of
every (row, head) pair that shares this kv head into the M dimension of one tl.dot (row r,
head kvh*G + h at m = r*G + h, padded to 16: vLLM's triton unified attention and FlashInfer's
decode fold GQA heads and query rows into one tile the same way), walks its partition BLOCK_N
tokens at a time (BLOCK_N/16 cache blocks, each looked up in the block table), and keeps an
online softmax in float32. Row r of a sequence with n rows sits at position
context_len - n + r and sees the keys up to it (and its window). Rows past a sequence's
`query_lens` (padding of a captured graph) see nothing and come out 0.
Partitions give a batch-1 long-context decode enough programs to fill the GPU; their partial
results are merged by log-sum-exp weights afterwards. The number of partitions comes from the
block table's width, which is fixed inside a CUDA graph, so a captured graph stays valid.
Tested under TRITON_INTERPRET=1 on a CPU (tests/unit/test_kernels.py) and compiled on an
NVIDIA GPU (tests/gpu/test_kernels_gpu.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

PARTITION = 256  # tokens per program (a multiple of BLOCK_N)
BLOCK_N = 64


# Triton reads a kernel's parameter annotations as type specializations (triton/runtime/
# jit.py, KernelParam.annotation), so its parameters stay unannotated.
@triton.jit
def _paged_decode_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, qlens_ptr, out_ptr, lse_ptr,  # type: ignore[no-untyped-def]
                         stride_table, stride_slot, n_parts, scale, window,
                         HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                         ROWS: tl.constexpr, PAGE: tl.constexpr, PARTITION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                         PRECISION: tl.constexpr):
    seq, kvh, part = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    GROUP: tl.constexpr = HEADS // KV_HEADS
    # int32 throughout: compiled Triton wants one type for `lo` on both sides of the `if`
    n_ctx = tl.load(lens_ptr + seq).to(tl.int32)
    if ROWS == 1:  # noqa: SIM108 (a plain decode reads no query_lens)
        n_q = 1
    else:
        n_q = tl.load(qlens_ptr + seq).to(tl.int32)
    first = n_ctx - n_q  # the first row's position
    lo = part * PARTITION
    hi = min(lo + PARTITION, n_ctx)
    if window > 0:  # skip whole tiles before the first row's window (their blocks may be freed)
        lo = max(lo, ((first + 1 - window) // BLOCK_N) * BLOCK_N)

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    r, h = offs_m // GROUP, offs_m % GROUP
    m_ok = (offs_m < ROWS * GROUP) & (r < n_q)
    d_ok = offs_d < HEAD_DIM
    q_pos = first + r  # (BLOCK_M,)
    qrow = (seq * ROWS + r) * HEADS + kvh * GROUP + h
    q = tl.load(q_ptr + qrow[:, None] * HEAD_DIM + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)

    m = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l = tl.zeros((BLOCK_M,), dtype=tl.float32)  # noqa: E741
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        in_seq = pos < hi
        block = tl.load(table_ptr + seq * stride_table + pos // PAGE, mask=in_seq, other=0)
        rows = (block * PAGE + pos % PAGE) * stride_slot + kvh * HEAD_DIM
        kv_ok = in_seq
        if window > 0:
            kv_ok = kv_ok & (pos > n_ctx - 1 - window - (n_q - 1))
        kv_mask = kv_ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
        # (BLOCK_M, BLOCK_N), float32; each row sees keys up to its own position
        s = tl.dot(q, tl.trans(k).to(q.dtype), input_precision=PRECISION) * scale
        ok = in_seq[None, :] & m_ok[:, None] & (pos[None, :] <= q_pos[:, None])
        if window > 0:
            ok = ok & (q_pos[:, None] - pos[None, :] < window)
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m - m_safe)
        l = l * alpha + tl.sum(p, 1)  # noqa: E741
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype),
                                            input_precision=PRECISION)
        m = m_new

    # an empty partition (past the end, before the window, a padded row) leaves l = 0:
    # weight 0 below, and output 0
    seen = l > 0
    l_safe = tl.where(seen, l, 1.0)
    lse = tl.where(seen, m + tl.log(l_safe), float("-inf"))
    out = acc / l_safe[:, None]
    store_ok = offs_m < ROWS * GROUP
    row = qrow * n_parts + part
    tl.store(lse_ptr + row, lse, mask=store_ok)
    tl.store(out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], out,
             mask=store_ok[:, None] & d_ok[None, :])


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                    window: int = 0, block_size: int = 16,
                    query_lens: torch.Tensor | None = None) -> torch.Tensor:
    """q (seqs, rows, heads, dim) -> (seqs, rows, heads, dim) in q's dtype: as
    kernels.paged_attention.paged_verify_reference (`query_lens` None: every row is real)."""
    seqs, n_rows, heads, dim = q.shape
    _, kv_heads, cache_dim = k_cache.shape
    if cache_dim != dim or heads % kv_heads or v_cache.shape != k_cache.shape:
        raise ValueError(f"queries {tuple(q.shape)} do not fit caches "
                         f"{tuple(k_cache.shape)} / {tuple(v_cache.shape)}")
    if k_cache.stride(1) != dim or k_cache.stride(2) != 1 or \
            v_cache.stride() != k_cache.stride():
        raise ValueError("the KV cache rows must be contiguous (kv_heads, head_dim)")
    if PARTITION % block_size:
        raise ValueError(f"block size {block_size} does not divide the partition {PARTITION}")
    q = q.contiguous()
    block_tables = block_tables.contiguous()
    if query_lens is None:  # one row: the kernel reads none (no fill launched per layer)
        query_lens = context_lens if n_rows == 1 else \
            torch.full((seqs,), n_rows, dtype=torch.long, device=q.device)
    n_parts = triton.cdiv(block_tables.shape[1] * block_size, PARTITION)
    out = torch.empty(seqs, n_rows, heads, n_parts, dim, device=q.device, dtype=torch.float32)
    lse = torch.empty(seqs, n_rows, heads, n_parts, device=q.device, dtype=torch.float32)
    group = heads // kv_heads
    _paged_decode_kernel[(seqs, kv_heads, n_parts)](
        q, k_cache, v_cache, block_tables, context_lens, query_lens, out, lse,
        block_tables.stride(0), k_cache.stride(0), n_parts, scale, window,
        HEADS=heads, KV_HEADS=kv_heads, HEAD_DIM=dim, ROWS=n_rows, PAGE=block_size,
        PARTITION=PARTITION, BLOCK_M=max(16, triton.next_power_of_2(n_rows * group)),
        BLOCK_D=max(16, triton.next_power_of_2(dim)), BLOCK_N=BLOCK_N,
        # float32 stays float32 on the GPU (tl.dot's default there is TF32, 10-bit mantissas)
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", num_warps=4, num_stages=2)
    if n_parts == 1:
        return out[..., 0, :].to(q.dtype)
    # a padded row has no non-empty partition: all -inf, so weights 0 rather than NaN
    top = lse.amax(-1, keepdim=True).clamp_min(-1e30)
    weights = torch.exp(lse - top)
    weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-30)
    return (weights[..., None] * out).sum(-2).to(q.dtype)


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                 window: int = 0, block_size: int = 16) -> torch.Tensor:
    """As kernels.paged_attention.paged_decode_reference: q (seqs, heads, dim) ->
    (seqs, heads, dim) in q's dtype (one row per sequence)."""
    return paged_attention(q[:, None], k_cache, v_cache, block_tables, context_lens, scale,
                           window, block_size)[:, 0]


def paged_verify(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, context_lens: torch.Tensor,
                 query_lens: torch.Tensor, scale: float, window: int = 0,
                 block_size: int = 16) -> torch.Tensor:
    """As kernels.paged_attention.paged_verify_reference."""
    return paged_attention(q, k_cache, v_cache, block_tables, context_lens, scale, window,
                           block_size, query_lens)
