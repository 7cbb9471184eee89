"""Choosing each sequence's next token from its logits: batched where the rows agree.

Order as in llama.cpp's chain (and llama-cpp-python's Llama.generate): the request's grammar
mask (backends.grammar), if it has one, then repetition penalty over the last 64 tokens,
then greedy, or top-k, top-p, min-p, temperature and a draw from a per-request generator (a
seed gives the same text every run, alone or in a batch).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import torch

from backends.base import SamplingParams
from backends.grammar import Constraint

if TYPE_CHECKING:
    import numpy as np

PENALTY_LAST_N = 64  # llama.cpp's default repeat-penalty window


class Sampler:
    def __init__(self) -> None:
        self._generators: dict[int, torch.Generator] = {}

    def forget(self, key: int) -> None:
        self._generators.pop(key, None)

    def generator(self, key: int, seed: int | None) -> torch.Generator:
        """The request's own random stream (speculative decoding draws from it too)."""
        if key not in self._generators:
            g = torch.Generator()
            g.manual_seed(seed if seed is not None else random.randrange(2**32))
            self._generators[key] = g
        return self._generators[key]

    def __call__(self, logits: torch.Tensor, params: list[SamplingParams],
                 histories: list[list[int]], keys: list[int],
                 grammars: list[Constraint | None] | None = None) -> list[int]:
        """One token per row of `logits` (rows, vocab); `keys` name each row's request,
        `grammars` its grammar state (None: unconstrained)."""
        # greedy rows stay on the device (one argmax for the batch); only rows that need a
        # mask, a penalty or a draw come to the CPU, where the grammars and the per-request
        # generators live
        grammars = grammars or [None] * len(params)
        out = logits.argmax(dim=-1).tolist()
        for i, p in enumerate(params):
            grammar = grammars[i]
            if p.temperature == 0.0 and p.repeat_penalty == 1.0 and grammar is None:
                continue
            row = logits[i].float().cpu()
            if grammar is not None:
                row = masked(row, grammar.allowed())
            if p.repeat_penalty != 1.0 and histories[i]:
                row = repetition_penalty(row, histories[i][-PENALTY_LAST_N:], p.repeat_penalty)
            if p.temperature == 0.0:
                out[i] = int(row.argmax())
            else:
                out[i] = int(torch.multinomial(filtered_probs(row, p), 1,
                                               generator=self.generator(keys[i], p.seed)))
        return out


def masked(row: torch.Tensor, allowed: np.ndarray) -> torch.Tensor:
    """`row` with the logits of tokens outside `allowed` (a boolean numpy row, the
    grammar's) at -inf; columns past the grammar's vocabulary are forbidden too."""
    ok = torch.zeros(row.shape[-1], dtype=torch.bool)
    n = min(len(allowed), row.shape[-1])
    ok[:n] = torch.from_numpy(allowed[:n])
    return row.masked_fill(~ok, float("-inf"))


def repetition_penalty(logits: torch.Tensor, recent: list[int], penalty: float) -> torch.Tensor:
    """llama.cpp's: a seen token's positive logit is divided by the penalty, a negative one
    multiplied, so both become less likely."""
    ids = torch.tensor(sorted(set(recent)), dtype=torch.long)
    seen = logits[ids]
    logits = logits.clone()
    logits[ids] = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits


def filtered_probs(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """Probabilities after top-k, top-p and min-p (on the untempered distribution, as
    llama.cpp orders them), then temperature."""
    if p.top_k > 0 and p.top_k < logits.numel():
        kth = torch.topk(logits, p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if p.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # keep the smallest prefix whose mass reaches top_p (always at least one token)
        drop = cum - sorted_logits.softmax(-1) >= p.top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop),
                                    float("-inf"))
    if p.min_p > 0.0:
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < p.min_p * probs.max(), float("-inf"))
    return (logits / p.temperature).softmax(-1)
