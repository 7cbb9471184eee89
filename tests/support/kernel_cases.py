"""Inputs of the kernel tests, shared by the CPU tier (Triton's interpreter,
tests/unit/test_kernels.py) and the GPU tier (compiled kernels, tests/gpu/)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import torch


def weights(n: int, k: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # a few large outliers per row, as real weights have: they set the int8 scales
    w = torch.randn(n, k, generator=g) * 0.02
    w[:, ::97] *= 8
    return w.to(dtype)


def close(out: torch.Tensor, ref: torch.Tensor, rtol: float) -> None:
    """Every element within `rtol` of the reference's largest magnitude."""
    scale = ref.abs().max().item()
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= rtol * scale, f"largest error {err:.3g} > {rtol} x {scale:.3g}"


def paged_case(lens: list[int], heads: int, kv_heads: int, dim: int, seed: int = 0,
               dtype: torch.dtype = torch.float32):
    """Caches of 16-token blocks (64, or as many as the lengths need), each sequence on
    shuffled blocks (table padded with 0): q, k_cache, v_cache, block_tables, context_lens."""
    g = torch.Generator().manual_seed(seed)
    need = sum(-(-n // 16) for n in lens)
    n_blocks = max(64, need + 1)
    k_cache = torch.randn(n_blocks * 16, kv_heads, dim, generator=g).to(dtype)
    v_cache = torch.randn(n_blocks * 16, kv_heads, dim, generator=g).to(dtype)
    width = max(-(-n // 16) for n in lens)
    free = torch.randperm(n_blocks - 1, generator=g) + 1  # block 0: garbage the padding reads
    tables = torch.zeros(len(lens), width, dtype=torch.long)
    used = 0
    for i, n in enumerate(lens):
        blocks = -(-n // 16)
        tables[i, :blocks] = free[used:used + blocks]
        used += blocks
    q = torch.randn(len(lens), heads, dim, generator=g).to(dtype)
    return q, k_cache, v_cache, tables, torch.tensor(lens)


def verify_case(lens: list[int], n_rows: list[int], rows: int, heads: int, kv_heads: int,
                dim: int, seed: int = 0, dtype: torch.dtype = torch.float32):
    """As `paged_case`, with `rows` query rows per sequence of which `n_rows[i]` are real:
    q (seqs, rows, heads, dim), k_cache, v_cache, block_tables, context_lens, query_lens."""
    _, k_cache, v_cache, tables, context_lens = paged_case(lens, heads, kv_heads, dim, seed,
                                                           dtype)
    g = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(len(lens), rows, heads, dim, generator=g).to(dtype)
    return q, k_cache, v_cache, tables, context_lens, torch.tensor(n_rows)


@contextlib.contextmanager
def triton_interpreter(modules: tuple[str, ...]) -> Iterator[None]:
    """TRITON_INTERPRET=1 for a test module: the kernel `modules` are dropped from
    sys.modules so that their next import decorates the kernels for the interpreter (Triton
    reads the variable then), and dropped again after, with the variable as it was."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    for name in modules:
        sys.modules.pop(name, None)
    try:
        yield
    finally:
        for name in modules:
            sys.modules.pop(name, None)
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old
