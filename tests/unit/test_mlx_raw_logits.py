"""The mlx backend's keeper of raw logits rows (backends.mlx.sampler.RawLogits), in a chain
with mlx-lm's own processors, without a model (the backend's logprobs on real models:
tests/integration/test_mlx_logprobs.py)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.sample_utils import make_logits_processors

from backends.mlx.sampler import RawLogits


def test_rows_are_kept_as_the_model_gave_them_before_a_penalty_rewrites_its_own():
    keeper = RawLogits()
    chain = [keeper, *make_logits_processors(repetition_penalty=2.0,
                                              repetition_context_size=64)]
    history = mx.array([1, 3])
    first = mx.array([[4.0, 2.0, -1.0, 6.0, 0.5]])
    second = mx.array([[1.0, 8.0, 3.0, -2.0, 0.0]])
    out = []
    for row in (first, second):
        for process in chain:
            row = process(history, row)
        out.append(np.array(row))
    # the penalty took effect on what the sampler sees...
    assert out[0].tolist() == [[4.0, 1.0, -1.0, 3.0, 0.5]]
    # ...while the keeper holds both rows untouched, first in, first out
    assert np.array(keeper.rows.popleft()).tolist() == [[4.0, 2.0, -1.0, 6.0, 0.5]]
    assert np.array(keeper.rows.popleft()).tolist() == [[1.0, 8.0, 3.0, -2.0, 0.0]]
    assert not keeper.rows
