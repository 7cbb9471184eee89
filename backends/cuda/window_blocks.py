"""KV blocks of sliding-window layers: a second, smaller pool whose blocks are given back
as soon as they slide out of the window.

Gemma 3 has five sliding-window layers (window 512) for every global one. The global layers
need every token's K/V, so they keep the sequence's whole block table; a sliding layer at
query position q reads only positions q - window + 1 .. q. Each sequence therefore has a
second table, `local_table`, parallel to `block_table` (same logical block index), whose
entries point into this pool, or at `null` (a scratch block, masked out by the window) once
the block is older than every future query's window. So at a 32k context the five local
layers hold about 1k tokens each instead of 32k: five sixths of Gemma's KV memory.

The pool is sized for the worst case of every running sequence (`blocks_per_seq`): the
window behind the next query plus one step's chunk of new tokens. So a local block is
always there when the scheduler has admitted a sequence, and scheduling and preemption
keep looking at the global pool only.

Prefix caching: local blocks keep the chained hash of their global twin when they are
given back; a cached prefix can be used only up to a point where the blocks of its last
window are still cached here too (vLLM's hybrid allocator has the same rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backends.cuda.kv_layout import BLOCK_SIZE
from backends.cuda.sequence import Sequence

if TYPE_CHECKING:
    from backends.cuda.block_manager import BlockManager


class WindowBlocks:
    def __init__(self, pool: BlockManager, window: int) -> None:
        self.pool, self.window = pool, window
        self.null = len(pool.blocks)  # the scratch block after the pool (see ModelRunner)

    def first_needed(self, position: int) -> int:
        """Index of the oldest block a query at `position` (or later) still reads."""
        return max(0, position - self.window + 1) // BLOCK_SIZE

    def usable_prefix(self, hashes: list[int]) -> int:
        """How many of the globally cached blocks (by chained hash) can be used: the blocks
        of the last window before the resume point must be cached here as well."""
        for n in range(len(hashes), 0, -1):
            start = self.first_needed(n * BLOCK_SIZE)
            if all(h in self.pool.by_hash for h in hashes[start:n]):
                return n
        return 0

    def admit(self, seq: Sequence, hashes: list[int]) -> None:
        """The local table for a sequence that resumes after len(hashes) cached blocks."""
        n = len(hashes)
        start = self.first_needed(n * BLOCK_SIZE)
        seq.local_table = [self.null] * start
        seq.local_table += [self.pool.take(self.pool.by_hash[h]).id for h in hashes[start:n]]

    def ensure(self, seq: Sequence, upto: int) -> None:
        """Local blocks for positions below `upto` (older ones only where still in reach)."""
        while len(seq.local_table) * BLOCK_SIZE < upto:
            seq.local_table.append(self.pool.take_fresh().id)

    def slide(self, seq: Sequence, hashes: list[int | None]) -> None:
        """After a step: give full blocks their hash, and give back every block that no query
        at or after `seq.num_computed` can see (it stays cached under its hash)."""
        for i, h in enumerate(hashes[:len(seq.local_table)]):
            block_id = seq.local_table[i]
            if h is not None and block_id != self.null:
                self.pool.set_hash(block_id, h)
        for i in range(min(self.first_needed(seq.num_computed), len(seq.local_table))):
            if seq.local_table[i] != self.null:
                self.pool.release(seq.local_table[i])
                seq.local_table[i] = self.null

    def free(self, seq: Sequence) -> None:
        for block_id in reversed(seq.local_table):
            if block_id != self.null:
                self.pool.release(block_id)
        seq.local_table = []
