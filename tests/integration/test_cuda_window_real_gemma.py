"""Sliding-window layers' own KV pool (backends/cuda/window_blocks.py) on the real Gemma 3
270M: it computes the same with the pool as without, past its window and on a prefix hit.
(The pool's bookkeeping: tests/unit/test_cuda_window.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backends.cuda.engine import GREEDY, Engine, EngineConfig
from backends.cuda.kv_layout import BLOCK_SIZE
from backends.cuda.loader import load_weights
from backends.cuda.models import build_model
from backends.cuda.models.layers import CausalLM
from backends.cuda.sequence import Sequence


@pytest.fixture(scope="module")
def gemma_model(gemma) -> CausalLM:
    weights = load_weights(gemma.path)
    model = build_model(weights.config)
    model.load_weights(weights.tensors)
    return model.eval()


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
