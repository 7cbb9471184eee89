"""Ember's sampling settings as mlx-lm samplers and logits processors.

mlx-lm's `make_sampler` draws from MLX's global random state, so two requests in one batch
could not each have their own seed. We chain mlx-lm's own filters (pure functions) and draw
with a per-request key instead: a seeded request gives the same answer alone or batched.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_logits_processors

from backends.base import SamplingParams
from backends.grammar import Constraint

PENALTY_LAST_N = 64  # the llama.cpp backend's repeat-penalty window

Sampler = Callable[[mx.array], mx.array]


def make_sampler(s: SamplingParams) -> Sampler | None:
    """None means greedy: BatchGenerator then samples the whole batch with one argmax."""
    if s.temperature == 0.0:
        return None
    key = mx.random.key(s.seed if s.seed is not None else random.randrange(2**32))
    # llama.cpp's order: top-k, top-p, min-p, then temperature
    filters: list[Callable[[mx.array], mx.array]] = []
    if s.top_k > 0:
        filters.append(lambda x: apply_top_k(x, s.top_k))
    if s.top_p < 1.0:
        filters.append(lambda x: apply_top_p(x, s.top_p))
    if s.min_p > 0.0:
        filters.append(lambda x: apply_min_p(x, s.min_p))

    def sample(logprobs: mx.array) -> mx.array:
        nonlocal key
        key, draw = mx.random.split(key)
        for f in filters:
            logprobs = f(logprobs)
        return mx.random.categorical(logprobs * (1.0 / s.temperature), key=draw)

    return sample


def make_processors(s: SamplingParams) -> list:
    if s.repeat_penalty == 1.0:
        return []
    return make_logits_processors(repetition_penalty=s.repeat_penalty,
                                  repetition_context_size=PENALTY_LAST_N)


class RawLogits:
    """A request's first logits processor when it asks for logprobs: it keeps each row as the
    model gave it, before penalties, a grammar's mask or temperature (BatchGenerator's
    `Response.logprobs` is the log-softmax after the processors). BatchGenerator computes a
    step ahead of the token it returns, so this holds the rows of the returned token and
    the next; the engine takes them first in, first out."""

    def __init__(self) -> None:
        self.rows: deque[mx.array] = deque()

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        self.rows.append(logits)
        # a new handle on the same data: mlx-lm's repetition penalty assigns into the row it
        # gets (`logits[:, tokens] = ...`), which would rewrite the one kept here
        return mx.array(logits)


class GrammarProcessor:
    """A logits processor (mlx-lm's `(tokens, logits) -> logits`) that masks one request's
    row with its grammar. BatchGenerator calls it once per step with the sequence's tokens,
    whose last one is the token sampled in the step before (the prompt's last token on the
    first call), so from the second call on that token moves the grammar on first."""

    def __init__(self, grammar: Constraint) -> None:
        self.grammar = grammar
        self.calls = 0

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self.calls:
            self.grammar.accept(token_id(tokens[-1]))
        self.calls += 1
        return apply_mask(self.grammar, logits)


def token_id(value: mx.array) -> int:
    """A one-element integer array's value: mlx types `item()` as any scalar."""
    item = value.item()
    if not isinstance(item, int):
        raise TypeError(f"a token id must be an integer, not {item!r}")
    return item


def apply_mask(grammar: Constraint, logits: mx.array) -> mx.array:
    """`logits` (1, vocab) with the tokens `grammar` forbids at -inf."""
    allowed = grammar.allowed()
    width = logits.shape[-1]
    if len(allowed) < width:  # columns past the grammar's vocabulary are never allowed
        mask = mx.concatenate([mx.array(allowed), mx.zeros(width - len(allowed), mx.bool_)])
    else:
        mask = mx.array(allowed[:width])
    return mx.where(mask, logits, mx.array(-float("inf"), dtype=logits.dtype))
