"""Log-probabilities of generated tokens, from a logits row: what every local backend reports
for a request that asks for `logprobs` (backends.base.TokenLogprob)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from backends.base import TokenLogprob, TopLogprob


def log_softmax_at(logits: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """log p(token) for `tokens` under the softmax of one raw logits row, summed in float64
    (152k terms: float32 would lose the small ones)."""
    row = np.asarray(logits, dtype=np.float32)
    top = float(row.max())
    total = np.exp((row - top).astype(np.float64)).sum()
    return row[tokens].astype(np.float64) - (top + np.log(total))


def token_logprob(logits: np.ndarray, token: int, n_top: int,
                  piece: Callable[[int], bytes]) -> TokenLogprob:
    """The entry of `token` sampled from the raw `logits` row, with the `n_top` most likely
    tokens there (ties by lower id, as an argmax picks them). `piece` gives a token's bytes."""
    row = np.asarray(logits, dtype=np.float32)
    best: list[int] = []
    if n_top > 0:
        n_top = min(n_top, row.shape[0])
        part = np.argpartition(-row, n_top - 1)[:n_top]
        best = sorted(part.tolist(), key=lambda t: (-row[t], t))
    values = log_softmax_at(row, np.array([token, *best], dtype=np.int64)).tolist()
    return TokenLogprob(id=token, logprob=values[0], top=tuple(
        _top(t, v, piece) for t, v in zip(best, values[1:], strict=True)), **_text(token, piece))


def _text(token: int, piece: Callable[[int], bytes]) -> dict:
    data = piece(token)
    return {"token": data.decode("utf-8", "replace"), "bytes": data}


def _top(token: int, logprob: float, piece: Callable[[int], bytes]) -> TopLogprob:
    return TopLogprob(logprob=logprob, **_text(token, piece))
