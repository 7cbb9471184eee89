"""Paged KV blocks: a free list, reference counts, and prefix caching by chained hashes.

A full block is known by the hash of its tokens chained with the hash of the block before
it, so equal hashes mean an equal whole prefix. Blocks whose K/V a finished sequence leaves
behind keep their hash while free; a later prompt with the same prefix takes them back
(cache hit) until they are reused for something else, least recently freed first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from backends.cuda.kv_layout import BLOCK_SIZE
from backends.cuda.sequence import Sequence
from backends.cuda.window_blocks import WindowBlocks


def block_hash(tokens: list[int], prev: int | None) -> int:
    return hash((prev, tuple(tokens)))


@dataclass
class Block:
    id: int
    ref_count: int = 0
    hash: int | None = None  # set once the block is full and its K/V computed


class BlockManager:
    def __init__(self, num_blocks: int, window: int = 0, num_window_blocks: int = 0) -> None:
        """`window`, `num_window_blocks`: a second pool for sliding-window layers
        (window_blocks.py); 0 when every layer reads the whole table."""
        self.blocks = [Block(i) for i in range(num_blocks)]
        # free blocks, least recently freed first; cached ones keep their hash until reused
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.by_hash: dict[int, int] = {}
        self.window = (WindowBlocks(BlockManager(num_window_blocks), window)
                       if window and num_window_blocks else None)

    @property
    def num_free(self) -> int:
        return len(self.free)

    def take(self, block_id: int) -> Block:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free[block_id]
        block.ref_count += 1
        return block

    def take_fresh(self) -> Block:
        block_id, _ = self.free.popitem(last=False)  # least recently freed
        block = self.blocks[block_id]
        if block.hash is not None and self.by_hash.get(block.hash) == block_id:
            del self.by_hash[block.hash]  # evict its cached prefix
        block.hash, block.ref_count = None, 1
        return block

    def release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free[block_id] = None

    def set_hash(self, block_id: int, h: int) -> None:
        block = self.blocks[block_id]
        if block.hash is None:
            block.hash = h
            self.by_hash.setdefault(h, block_id)

    def _cached_hashes(self, seq: Sequence) -> list[int]:
        """Chained hashes of the cached blocks that hold the start of `seq`'s tokens. The last
        token is never taken from the cache: its logits are needed to sample the next one."""
        hashes, prev = [], None
        for i in range((len(seq) - 1) // BLOCK_SIZE):
            h = block_hash(seq.block(i), prev)
            if h not in self.by_hash:
                break
            hashes.append(h)
            prev = h
        if self.window is not None:
            hashes = hashes[:self.window.usable_prefix(hashes)]
        return hashes

    def cached_prefix(self, seq: Sequence) -> list[int]:
        """Ids of the cached blocks that hold the start of `seq`'s tokens."""
        return [self.by_hash[h] for h in self._cached_hashes(seq)]

    def can_allocate(self, seq: Sequence) -> bool:
        cached = self.cached_prefix(seq)
        fresh_cached = sum(1 for b in cached if self.blocks[b].ref_count == 0)
        return seq.num_blocks - len(cached) + fresh_cached <= self.num_free

    def allocate(self, seq: Sequence, use_cache: bool = True) -> None:
        """Blocks for all of `seq`'s tokens, cached prefix first; sets `num_computed`."""
        assert not seq.block_table
        hashes = self._cached_hashes(seq) if use_cache else []
        seq.block_table = [self.take(self.by_hash[h]).id for h in hashes]
        seq.block_table += [self.take_fresh().id for _ in range(seq.num_blocks - len(hashes))]
        seq.num_computed = len(hashes) * BLOCK_SIZE
        if self.window is not None:
            self.window.admit(seq, hashes)

    def free_seq(self, seq: Sequence) -> None:
        # the last blocks go first onto the free list, so a prefix outlives its extensions
        for block_id in reversed(seq.block_table):
            self.release(block_id)
        seq.block_table = []
        if self.window is not None:
            self.window.free(seq)
        seq.num_computed = 0

    def can_append(self, seq: Sequence) -> bool:
        """Room for `seq`'s next token (a new block when the last one is full)."""
        return len(seq.block_table) >= seq.num_blocks or self.num_free >= 1

    def ensure_slots(self, seq: Sequence, upto: int) -> None:
        """Blocks for the first `upto` tokens of `seq` (the global table, and the window
        pool's table for the tokens a step is about to compute)."""
        while len(seq.block_table) * BLOCK_SIZE < upto:
            seq.block_table.append(self.take_fresh().id)
        if self.window is not None:
            self.window.ensure(seq, upto)

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Roll `seq` back to its first `num_tokens` tokens (speculative decoding's rejected
        proposals): blocks past them are freed, first in line for reuse since they hold
        nothing worth caching, and K/V beyond them counts as not computed. A kept block that
        will be written again loses its prefix hash (its K/V is about to change). The
        sliding-window pool's table is cut the same way."""
        del seq.tokens[num_tokens:]
        seq.num_computed = min(seq.num_computed, num_tokens)
        self._cut(seq.block_table, seq.num_blocks, seq.num_computed // BLOCK_SIZE)
        if self.window is not None:
            self.window.pool._cut(seq.local_table, seq.num_blocks,
                                  seq.num_computed // BLOCK_SIZE, skip=self.window.null)

    def _cut(self, table: list[int], keep: int, rewritten_from: int,
             skip: int | None = None) -> None:
        for block_id in table[keep:]:
            if block_id == skip:
                continue
            self.release(block_id)
            if self.blocks[block_id].ref_count == 0 and self.blocks[block_id].hash is None:
                self.free.move_to_end(block_id, last=False)
        del table[keep:]
        for block_id in table[rewritten_from:]:
            block = self.blocks[block_id] if block_id != skip else None
            if block is not None and block.hash is not None:
                assert block.ref_count == 1, "a shared cached block lies past the rollback"
                if self.by_hash.get(block.hash) == block_id:
                    del self.by_hash[block.hash]
                block.hash = None

    def register_computed(self, seq: Sequence) -> None:
        """Give every full block whose K/V is now computed its chained hash (cacheable)."""
        prev = None
        for i in range(seq.num_computed // BLOCK_SIZE):
            block = self.blocks[seq.block_table[i]]
            if block.hash is None:
                self.set_hash(block.id, block_hash(seq.block(i), prev))
            prev = block.hash
        if self.window is not None:
            self.window.slide(seq, [self.blocks[b].hash for b in seq.block_table])
