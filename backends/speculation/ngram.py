"""Prompt lookup: propose the tokens that followed the latest earlier occurrence of the text's
last few tokens. Free, and right whenever the answer copies from its context (editing code,
quoting). One index for every backend: it grows with each token, so a proposal is a
dictionary lookup instead of a scan of the whole conversation.
"""

from __future__ import annotations

from collections.abc import Iterable

# Longest match first: the occurrence that shares the most context is the likeliest to go on
# the same way. Replayed (benchmarks/lookup_replay.py) on the 1.5B's and the 0.5B's greedy
# answers (128 tokens) to 9 code-editing and 3 code-writing prompts, the cost model choosing:
# 8-grams first sped the edits up 1.05x over llama.cpp's (4, 3, 2) (geometric mean; none
# slower), the cuda engine's (3, 2, 1) was 0.90x and MLX's (4, 3, 2, 1) 0.95x (a single
# token's last successor is mostly wrong, and the rejections shorten the good proposals
# too); n-grams past 8 added under 1%. Written code barely differed (1.00-1.01x).
NGRAM_SIZES = (8, 6, 4, 3, 2)


class NgramIndex:
    """The tokens so far (prompt and answer) and, for each n-gram of them, where it last
    ended: the index of the token that followed it."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.tokens: list[int] = []
        self._next: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        for tok in tokens:
            p = len(self.tokens)
            for n in NGRAM_SIZES:
                if p >= n:
                    self._next[tuple(self.tokens[p - n:p])] = p
            self.tokens.append(tok)

    def follow(self, tokens: list[int]) -> None:
        """Catch up with `tokens`, the whole text so far: usually the index's tokens plus a
        few new ones; anything else (text taken back) rebuilds the index."""
        n = len(self.tokens)
        if tokens[:n] != self.tokens:
            self.tokens, self._next = [], {}
            n = 0
        self.extend(tokens[n:])

    def propose(self, k: int) -> list[int]:
        """Up to `k` tokens: what followed the latest earlier occurrence of the longest
        n-gram the text ends with ([] when none recurs)."""
        for n in NGRAM_SIZES:
            if len(self.tokens) <= n:
                continue
            start = self._next.get(tuple(self.tokens[-n:]))
            if start is not None:
                return self.tokens[start:start + k]
        return []
