"""Sliding-window layers' own KV pool (backends/cuda/window_blocks.py): blocks that slid out
of every future query's window go back to the pool, global layers keep everything, prefix
hits need the last window's blocks, and Gemma 3 computes the same with the pool as without."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backends.cuda.block_manager import BlockManager
from backends.cuda.engine import GREEDY, Engine, EngineConfig, window_pool_size
from backends.cuda.kv_layout import blocks_per_seq
from backends.cuda.loader import load_weights
from backends.cuda.model_config import ModelConfig
from backends.cuda.models import build_model
from backends.cuda.models.layers import CausalLM
from backends.cuda.scheduler import Scheduler
from backends.cuda.sequence import BLOCK_SIZE, Sequence

WINDOW, CHUNK = 40, 16  # a query sees itself and the 39 positions before it


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


def test_the_pool_exists_only_for_sliding_layers_with_a_window_under_the_context(
        gemma_config):
    config = EngineConfig(context=4096, max_seqs=2, max_tokens=256)
    # 511 + 256 positions: 48 blocks, one more for the boundary, for each of 2 sequences
    assert window_pool_size(gemma_config, config, 256) == (512, 98)
    assert window_pool_size(gemma_config, EngineConfig(context=512), 32) == (0, 0)
    no_sliding = replace(gemma_config, sliding_window=0)
    assert window_pool_size(no_sliding, config, 256) == (0, 0)
    assert window_pool_size(gemma_config, replace(config, window_pool=False), 256) == (0, 0)


@pytest.fixture(scope="module")
def gemma_model(gemma) -> CausalLM:
    weights = load_weights(gemma.path)
    model = build_model(weights.config)
    model.load_weights(weights.tensors)
    return model.eval()


@pytest.fixture(scope="module")
def gemma_config(gemma_model) -> ModelConfig:
    return gemma_model.config


def test_gemma_greedy_past_the_window_is_the_same_with_the_pool_and_with_a_prefix_hit(
        gemma_model):
    """A 600-token prompt (past Gemma's 512-token window) in 128-token chunks: the engine
    whose sliding layers keep only their window must generate what the one that keeps every
    block does, and so must a second run that resumes from the prefix cache past the window
    (its window blocks come back from the pool's cache)."""
    prompt = [2] + list(range(1000, 1599))  # ordinary word-piece ids after <bos>
    cpu, f32 = torch.device("cpu"), torch.float32
    config = EngineConfig(context=1024, max_seqs=2, max_tokens=128)
    pooled = Engine(gemma_model, config, cpu, f32)
    assert pooled.runner.window_cache.shape[2] < pooled.runner.kv_cache.shape[2]
    cold = pooled.generate([prompt], 6)[0]
    warm = Sequence(prompt, GREEDY, 6)
    pooled.add(warm)
    while warm.num_output < 6:
        pooled.step()
    pooled.finish(warm)
    assert warm.num_cached == (len(prompt) - 1) // BLOCK_SIZE * BLOCK_SIZE > 512

    plain = Engine(gemma_model, replace(config, window_pool=False), cpu, f32)
    assert plain.blocks.window is None and plain.runner.window_cache is None
    # K and V of one token in one layer: 1 kv head x 256 dims x 4 bytes x 2. Every layer
    # holds 64 blocks per sequence without the pool; with it, the 15 sliding layers hold 41
    # (511 + 128 positions), the 3 global ones 64 (plus one scratch block per pool)
    slot = 2 * 256 * 4
    assert plain.runner.kv_cache_bytes == 18 * (128 + 1) * BLOCK_SIZE * slot
    assert pooled.runner.kv_cache_bytes == (3 * (128 + 1) + 15 * (82 + 1)) * BLOCK_SIZE * slot
    assert plain.generate([prompt], 6)[0] == cold == warm.output
