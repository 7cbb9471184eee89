"""Attention over the cuda engine's paged KV cache, and the one dispatch point for decode.

The cache layout is the model runner's (backends/cuda/model_runner.py): per layer
`k_cache`, `v_cache` of shape (slots, kv_heads, head_dim), slot = block * block_size +
offset; `block_tables` (seqs, max_blocks) padded with 0 past a sequence's blocks;
`context_lens` (seqs,) tokens in the cache, the newest being the query's own.

`gather_blocks` and `attention_mask` are the engine's plain-torch attention (its prefill
uses them too); `paged_decode_reference` is its decode, `paged_verify_reference` its
multi-row decode (a speculative verification: several query rows per sequence, causal among
themselves), and what the Triton kernel (kernels.paged_attention_triton) is tested against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import choose_backend

BLOCK_SIZE = 16


def gather_blocks(cache: torch.Tensor, block_tables: torch.Tensor,
                  block_size: int = BLOCK_SIZE) -> torch.Tensor:
    """(seqs, kv_heads, blocks * block_size, dim): each sequence's cached rows, in order."""
    _, kv_heads, dim = cache.shape
    rows = cache.view(-1, block_size, kv_heads, dim).index_select(0, block_tables.flatten())
    return rows.view(block_tables.shape[0], -1, kv_heads, dim).transpose(1, 2)


def attention_mask(q_pos: torch.Tensor, n_keys: int, window: int = 0) -> torch.Tensor:
    """Causal (and sliding-window) mask, (..., queries, keys) from query positions."""
    k_pos = torch.arange(n_keys, device=q_pos.device)
    allowed = k_pos <= q_pos[..., None]
    if window:
        # llama.cpp and Hugging Face: a query sees the last `window` positions, itself included
        allowed &= q_pos[..., None] - k_pos < window
    return allowed


def paged_decode_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float, window: int = 0,
                           block_size: int = BLOCK_SIZE) -> torch.Tensor:
    """q (seqs, heads, dim), one query per sequence at position context_len - 1 ->
    (seqs, heads, dim). Heads share kv heads in consecutive groups (heads // kv_heads)."""
    k = gather_blocks(k_cache, block_tables, block_size)
    v = gather_blocks(v_cache, block_tables, block_size)
    q_pos = (context_lens - 1)[:, None]  # (seqs, 1): the query is the newest token
    mask = attention_mask(q_pos, k.shape[2], window)[:, None]  # (seqs, 1, 1, keys)
    out = F.scaled_dot_product_attention(q[:, :, None, :], k.to(q.dtype), v.to(q.dtype),
                                         attn_mask=mask, scale=scale, enable_gqa=True)
    return out[:, :, 0, :]


def paged_verify_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           query_lens: torch.Tensor, scale: float, window: int = 0,
                           block_size: int = BLOCK_SIZE) -> torch.Tensor:
    """q (seqs, rows, heads, dim) -> (seqs, rows, heads, dim). Sequence i brings
    query_lens[i] <= rows real rows, the newest tokens of its cache: row r sits at position
    context_lens[i] - query_lens[i] + r and sees the keys up to it (its own proposals before
    it, none after). Rows past query_lens[i] are padding (a captured graph's) and come out 0."""
    seqs, rows = q.shape[:2]
    k = gather_blocks(k_cache, block_tables, block_size)
    v = gather_blocks(v_cache, block_tables, block_size)
    r = torch.arange(rows, device=q.device)
    real = r[None, :] < query_lens[:, None]  # (seqs, rows)
    # a padded row takes the last real row's position, so its mask is never empty (no NaN)
    q_pos = (context_lens - query_lens)[:, None] + torch.minimum(r[None, :],
                                                                (query_lens - 1)[:, None])
    mask = attention_mask(q_pos, k.shape[2], window)[:, None]  # (seqs, 1, rows, keys)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.to(q.dtype), v.to(q.dtype),
                                         attn_mask=mask, scale=scale, enable_gqa=True)
    return out.transpose(1, 2) * real[:, :, None, None]


def paged_verify(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, context_lens: torch.Tensor,
                 query_lens: torch.Tensor, scale: float, window: int = 0,
                 block_size: int = BLOCK_SIZE, backend: str | None = None) -> torch.Tensor:
    """Multi-row decode attention (see `paged_verify_reference`): one launch for every
    sequence and row, Triton on CUDA, the reference elsewhere (kernels.dispatch)."""
    if choose_backend(q, backend) == "triton":
        from kernels.paged_attention_triton import paged_verify as triton_verify

        return triton_verify(q, k_cache, v_cache, block_tables, context_lens, query_lens,
                             scale, window, block_size)
    return paged_verify_reference(q, k_cache, v_cache, block_tables, context_lens,
                                  query_lens, scale, window, block_size)


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                 window: int = 0, block_size: int = BLOCK_SIZE,
                 backend: str | None = None) -> torch.Tensor:
    """Decode attention (see `paged_decode_reference`): Triton on CUDA, the reference
    elsewhere (kernels.dispatch)."""
    if choose_backend(q, backend) == "triton":
        from kernels.paged_attention_triton import paged_decode as triton_decode

        return triton_decode(q, k_cache, v_cache, block_tables, context_lens, scale, window,
                             block_size)
    return paged_decode_reference(q, k_cache, v_cache, block_tables, context_lens, scale,
                                  window, block_size)
