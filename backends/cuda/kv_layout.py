"""How the cuda engine lays out its KV cache, in plain Python (no torch): the engine allocates
by these numbers and the fit model (app/fit/cuda.py) sizes the engine's memory by the same
ones, so the two cannot drift apart."""

from __future__ import annotations

BLOCK_SIZE = 16  # tokens per KV block (vLLM's default; small blocks waste little per sequence)
GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)  # decode batches captured as CUDA graphs
# Verification steps (a sequence's last token and 1..8 proposals) run as multi-row decodes of
# up to VERIFY_ROWS[-1] rows per sequence; on a GPU they replay graphs captured per (batch,
# rows) of these sizes, a step padded up to the next: 4 x 4 = 16 graphs beside the 7 above.
VERIFY_ROWS = (2, 3, 5, 9)
VERIFY_BATCH_SIZES = (1, 2, 4, 8)


def blocks_per_context(context: int) -> int:
    """Global-layer blocks one sequence of `context` tokens can fill."""
    return -(-context // BLOCK_SIZE)


def global_blocks(context: int, max_seqs: int) -> int:
    """The engine's default global pool: room for `max_seqs` whole contexts."""
    return blocks_per_context(context) * max_seqs


def blocks_per_seq(window: int, max_chunk: int) -> int:
    """Sliding-window blocks one sequence can hold at once: positions q - window + 1 ..
    q + chunk - 1 for a step that starts at q, one more for the block boundary."""
    return -(-(window - 1 + max_chunk) // BLOCK_SIZE) + 1


def pool_slots(blocks: int) -> int:
    """KV slots of a pool of `blocks` blocks, plus its one scratch block (padded rows)."""
    return (blocks + 1) * BLOCK_SIZE
