"""Paged KV blocks: a free list, reference counts, and prefix caching by chained hashes.

A full block is known by the hash of its tokens chained with the hash of the block before
it, so equal hashes mean an equal whole prefix. Blocks whose K/V a finished sequence leaves
behind keep their hash while free; a later prompt with the same prefix takes them back
(cache hit) until they are reused for something else, least recently freed first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from backends.cuda.sequence import BLOCK_SIZE, Sequence


def block_hash(tokens: list[int], prev: int | None) -> int:
    return hash((prev, tuple(tokens)))


@dataclass
class Block:
    id: int
    ref_count: int = 0
    hash: int | None = None  # set once the block is full and its K/V computed


class BlockManager:
    def __init__(self, num_blocks: int) -> None:
        self.blocks = [Block(i) for i in range(num_blocks)]
        # free blocks, least recently freed first; cached ones keep their hash until reused
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.by_hash: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return len(self.free)

    def _take(self, block_id: int) -> Block:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free[block_id]
        block.ref_count += 1
        return block

    def _take_fresh(self) -> Block:
        block_id, _ = self.free.popitem(last=False)  # least recently freed
        block = self.blocks[block_id]
        if block.hash is not None and self.by_hash.get(block.hash) == block_id:
            del self.by_hash[block.hash]  # evict its cached prefix
        block.hash, block.ref_count = None, 1
        return block

    def cached_prefix(self, seq: Sequence) -> list[int]:
        """Ids of the cached blocks that hold the start of `seq`'s tokens. The last token is
        never taken from the cache: its logits are needed to sample the next one."""
        ids, prev = [], None
        for i in range((len(seq) - 1) // BLOCK_SIZE):
            h = block_hash(seq.block(i), prev)
            if h not in self.by_hash:
                break
            ids.append(self.by_hash[h])
            prev = h
        return ids

    def can_allocate(self, seq: Sequence) -> bool:
        cached = self.cached_prefix(seq)
        fresh_cached = sum(1 for b in cached if self.blocks[b].ref_count == 0)
        return seq.num_blocks - len(cached) + fresh_cached <= self.num_free

    def allocate(self, seq: Sequence, use_cache: bool = True) -> None:
        """Blocks for all of `seq`'s tokens, cached prefix first; sets `num_computed`."""
        assert not seq.block_table
        cached = self.cached_prefix(seq) if use_cache else []
        seq.block_table = [self._take(b).id for b in cached]
        seq.block_table += [self._take_fresh().id for _ in range(seq.num_blocks - len(cached))]
        seq.num_computed = len(cached) * BLOCK_SIZE

    def free_seq(self, seq: Sequence) -> None:
        # the last blocks go first onto the free list, so a prefix outlives its extensions
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free[block_id] = None
        seq.block_table = []
        seq.num_computed = 0

    def can_append(self, seq: Sequence) -> bool:
        """Room for `seq`'s next token (a new block when the last one is full)."""
        return len(seq.block_table) >= seq.num_blocks or self.num_free >= 1

    def ensure_slots(self, seq: Sequence, upto: int) -> None:
        """Blocks for the first `upto` tokens of `seq`."""
        while len(seq.block_table) * BLOCK_SIZE < upto:
            seq.block_table.append(self._take_fresh().id)

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Roll `seq` back to its first `num_tokens` tokens (speculative decoding's rejected
        proposals): blocks past them are freed, first in line for reuse since they hold
        nothing worth caching, and K/V beyond them counts as not computed. A kept block that
        will be written again loses its prefix hash (its K/V is about to change)."""
        del seq.tokens[num_tokens:]
        seq.num_computed = min(seq.num_computed, num_tokens)
        for block_id in seq.block_table[seq.num_blocks:]:
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free[block_id] = None
                if block.hash is None:
                    self.free.move_to_end(block_id, last=False)
        del seq.block_table[seq.num_blocks:]
        for block_id in seq.block_table[seq.num_computed // BLOCK_SIZE:]:
            block = self.blocks[block_id]
            if block.hash is not None:
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
                block.hash = block_hash(seq.block(i), prev)
                self.by_hash.setdefault(block.hash, block.id)
            prev = block.hash
