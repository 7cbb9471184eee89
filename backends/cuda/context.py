"""The batch metadata attention needs, built by the model runner once per step.

The model's `forward(input_ids, positions, ctx)` sees a flat list of tokens from many
sequences; `Context` says where each token's K/V goes in the paged cache (slot_mapping) and
which cache blocks each sequence reads (block_tables).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Context:
    slot_mapping: torch.Tensor  # (tokens,) flat cache slot = block * block_size + offset
    block_tables: torch.Tensor  # (seqs, max_blocks), padded with 0 (masked out by lengths)
    context_lens: torch.Tensor  # (seqs,) tokens in the cache after this step, per sequence
    # Prefill (or mixed) steps: how many query tokens each sequence brings, in order. None
    # means a pure decode step: one query per sequence, attention batched over sequences
    # (the shape CUDA graphs capture).
    query_lens: list[int] | None = None
    context_lens_list: list[int] | None = None
    # Sliding-window layers with their own block pool (window_blocks.py): their slots and
    # tables, padded with the pool's scratch block. None: they use the tables above.
    local_slot_mapping: torch.Tensor | None = None
    local_block_tables: torch.Tensor | None = None
    # A multi-row decode step (speculative verification): every sequence brings `rows` flat
    # rows in order, of which `query_rows[i]` (seqs,) are real (its last token and its
    # proposals), the rest padding that writes the scratch slot. rows = 1: a plain decode.
    rows: int = 1
    query_rows: torch.Tensor | None = None

    @property
    def is_decode(self) -> bool:
        return self.query_lens is None
