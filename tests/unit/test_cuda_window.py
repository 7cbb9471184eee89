"""Sliding-window layers' own KV pool (backends/cuda/window_blocks.py): blocks that slid out
of every future query's window go back to the pool, global layers keep everything, prefix
hits need the last window's blocks, and the pool exists only where it saves memory. (Gemma 3
computing the same with the pool as without: tests/integration/test_cuda_window_real_gemma.py.)"""

from __future__ import annotations

from dataclasses import replace

from backends.cuda.block_manager import BlockManager
from backends.cuda.engine import EngineConfig, window_pool_size
from backends.cuda.kv_layout import BLOCK_SIZE, blocks_per_seq
from backends.cuda.model_config import ModelConfig
from backends.cuda.scheduler import Scheduler
from backends.cuda.sequence import Sequence

WINDOW, CHUNK = 40, 16  # a query sees itself and the 39 positions before it
# Gemma 3 270M's shape: in each group of 6 layers 5 see a 512-token window, 1 sees all
GEMMA_270M = ModelConfig(arch="gemma3", vocab_size=262144, hidden_size=640, num_layers=18,
                         num_heads=4, num_kv_heads=1, head_dim=256, intermediate_size=2048,
                         rms_norm_eps=1e-6, rope_theta=1e6, max_position=32768,
                         tie_embeddings=True, qk_norm=True, sliding_window=512,
                         sliding_pattern=6)


def run_prompt(sched: Scheduler, seq: Sequence) -> None:
    sched.add(seq)
    while seq.num_computed < len(seq):
        sched.postprocess(sched.schedule())


def test_blocks_older_than_the_window_go_back_while_the_global_table_keeps_them():
    local = blocks_per_seq(WINDOW, CHUNK)
    assert local == 5  # 39 + 16 positions span at most 4 blocks, plus a boundary
    blocks = BlockManager(64, WINDOW, local)
    sched = Scheduler(blocks, max_seqs=1, max_tokens=CHUNK)
    seq = Sequence(list(range(200)))
    sched.add(seq)
    held = []
    while seq.num_computed < len(seq):
        sched.postprocess(sched.schedule())
        live = [b for b in seq.local_table if b != blocks.window.null]
        held.append(len(live))
        # every block a query at num_computed can see is still there
        first = max(0, seq.num_computed - WINDOW + 1) // BLOCK_SIZE
        assert all(b != blocks.window.null for b in seq.local_table[first:])
        assert all(b == blocks.window.null for b in seq.local_table[:first])
    assert max(held) <= local - 1 and blocks.window.pool.num_free >= 1
    assert len(seq.block_table) == 13 and blocks.num_free == 64 - 13  # global: all of it
    blocks.free_seq(seq)
    assert blocks.window.pool.num_free == local and seq.local_table == []


def test_a_prefix_hit_needs_the_window_blocks_before_it_cached_too():
    local = blocks_per_seq(WINDOW, CHUNK)
    blocks = BlockManager(64, WINDOW, 2 * local)
    sched = Scheduler(blocks, max_seqs=2, max_tokens=CHUNK)
    first = Sequence(list(range(100)))
    run_prompt(sched, first)
    sched.finish(first)
    # the same 100 tokens again: 6 full blocks are cached globally; locally the last ones are
    again = Sequence(list(range(100)))
    assert len(blocks.cached_prefix(again)) == 6
    run_prompt(sched, again)
    assert again.num_cached == 6 * BLOCK_SIZE
    sched.finish(again)
    # evict the window pool's cache: the global prefix alone cannot be used
    filler = Sequence(list(range(1000, 1000 + 2 * local * BLOCK_SIZE)))
    blocks.window.ensure(filler, len(filler))
    blocks.window.free(filler)
    assert len(blocks.cached_prefix(Sequence(list(range(100))))) == 0


def test_the_pool_exists_only_for_sliding_layers_with_a_window_under_the_context():
    config = EngineConfig(context=4096, max_seqs=2, max_tokens=256)
    # 511 + 256 positions: 48 blocks, one more for the boundary, for each of 2 sequences
    assert window_pool_size(GEMMA_270M, config, 256) == (512, 98)
    assert window_pool_size(GEMMA_270M, EngineConfig(context=512), 32) == (0, 0)
    no_sliding = replace(GEMMA_270M, sliding_window=0)
    assert window_pool_size(no_sliding, config, 256) == (0, 0)
    assert window_pool_size(GEMMA_270M, replace(config, window_pool=False), 256) == (0, 0)
