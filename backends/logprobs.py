"""Log-probabilities of generated tokens, from a logits row: what every local backend reports
for a request that asks for `logprobs` (backends.base.TokenLogprob)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from backends.base import TokenLogprob, TopLogprob


def log_softmax_at(logits: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """log p(token) for `tokens` under the softmax of one raw logits row. The terms are
    float32 (each within 1e-7 of its value) and summed in float64: 152k of them summed in
    float32 would lose the small ones; computed in float64 they cost ten times as much."""
    row = np.asarray(logits, dtype=np.float32)
    top = float(row.max())
    total = np.exp(row - np.float32(top)).sum(dtype=np.float64)
    return row[tokens].astype(np.float64) - (top + np.log(total))


def top_tokens(row: np.ndarray, n: int) -> list[int]:
    """The `n` highest logits' tokens, best first, ties by lower id (as an argmax picks).
    One argmax each (0.01 ms over Qwen's 152k logits; n is at most 20): a partition of the
    row took 2-4 ms on the 2-core CI machine, on every token of a request that asks, and
    picks among tied logits at its boundary by no rule."""
    n = min(n, row.shape[0])
    if n <= 0:
        return []
    work = row.copy()
    best: list[int] = []
    for _ in range(n):
        t = int(work.argmax())
        if work[t] == -np.inf:  # only -inf is left (a masked row): the lowest ids unused
            taken = set(best)
            return best + [i for i in range(row.shape[0]) if i not in taken][:n - len(best)]
        best.append(t)
        work[t] = -np.inf
    return best


def token_logprob(logits: np.ndarray, token: int, n_top: int,
                  piece: Callable[[int], bytes]) -> TokenLogprob:
    """The entry of `token` sampled from the raw `logits` row, with the `n_top` most likely
    tokens there (ties by lower id, as an argmax picks them). `piece` gives a token's bytes."""
    row = np.asarray(logits, dtype=np.float32)
    best = top_tokens(row, n_top)
    values = log_softmax_at(row, np.array([token, *best], dtype=np.int64)).tolist()
    return TokenLogprob(id=token, logprob=values[0], top=tuple(
        _top(t, v, piece) for t, v in zip(best, values[1:], strict=True)), **_text(token, piece))


def _text(token: int, piece: Callable[[int], bytes]) -> dict:
    data = piece(token)
    return {"token": data.decode("utf-8", "replace"), "bytes": data}


def _top(token: int, logprob: float, piece: Callable[[int], bytes]) -> TopLogprob:
    return TopLogprob(logprob=logprob, **_text(token, piece))
