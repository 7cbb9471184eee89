"""Speculative decoding on MLX: a proposer guesses the next tokens, the model checks them all
in one forward pass and keeps the run it agrees with, plus its own next token.

Verification is mlx-lm's rule (`mlx_lm.generate.speculative_generate_step`): at each position
the model picks its own token, with the request's logits processors and sampler (greedy:
argmax), and a proposal is accepted while it equals that token. Every token is therefore the
model's own choice given the tokens before it: greedy output is identical to decoding without
speculation, sampled output has the model's distribution. Rejected positions are trimmed off
the KV cache (`trim_prompt_cache`).

We run our own loop instead of calling `speculative_generate_step` because that one takes a
draft model only: with a proposer interface, the draft model and prompt lookup share one
verifier, the engine advances a request one round per step (so cancellation and other
requests interleave), and the stats count proposed and accepted tokens exactly.

Proposers:
- `DraftProposer`: a smaller MLX model with the same tokenizer, greedy, with its own KV cache
  that keeps whatever prefix is still valid after each round.
- `LookupProposer`: prompt lookup, the index every backend uses (backends.speculation.ngram):
  the tokens that followed the latest earlier occurrence of the answer's last few tokens in
  the prompt or answer. No second model; wins when the answer repeats its input (code edits).

Under a grammar (`SpeculativeRun.grammar`), proposals are cut at the first token it rejects,
and each verified position is masked by the grammar's state after the tokens accepted before
it (the grammar consumes each kept token as it is picked).

Every round proposes `max_draft` tokens (or what the request may still produce): the cost
model the other backends share (backends.speculation) is not used here yet, as it has not
been measured on Apple Silicon, where an extra verified row costs little.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import mlx.core as mx
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from backends.errors import InvalidRequestError
from backends.grammar import Constraint
from backends.mlx.sampler import apply_mask, token_id
from backends.speculation.ngram import NgramIndex

PENALTY_LAST_N = 64  # tokens the logits processors see (backends.mlx.sampler's window)


class Proposer(Protocol):
    def propose(self, history: list[int], k: int) -> list[int]: ...


def check_trimmable(cache: list, what: str) -> None:
    if not can_trim_prompt_cache(cache):
        raise InvalidRequestError(f"speculative decoding needs a KV cache that can be rolled "
                                  f"back, and {what}'s cannot (sliding-window layers)")


def prefill(model: Any, cache: list, tokens: list[int], step: int) -> None:
    """Run `tokens` into `cache`, `step` tokens at a time."""
    for i in range(0, len(tokens), step):
        model(mx.array(tokens[i:i + step])[None], cache=cache)
        mx.eval([c.state for c in cache])


class DraftProposer:
    def __init__(self, model: Any, prefill_step: int) -> None:
        self.model, self.prefill_step = model, prefill_step
        self.cache = make_prompt_cache(model)
        check_trimmable(self.cache, "the draft model")
        self.seen: list[int] = []  # the tokens in self.cache

    def propose(self, history: list[int], k: int) -> list[int]:
        # keep the cached prefix the history still agrees with (the accepted proposals)
        keep = 0
        limit = min(len(self.seen), len(history) - 1)  # re-run at least the last token
        while keep < limit and self.seen[keep] == history[keep]:
            keep += 1
        trim_prompt_cache(self.cache, len(self.seen) - keep)
        new = history[keep:]
        prefill(self.model, self.cache, new[:-1], self.prefill_step)
        y = new[-1]
        out: list[int] = []
        for _ in range(k):
            logits = self.model(mx.array([[y]]), cache=self.cache)
            y = token_id(mx.argmax(logits[0, -1]))
            out.append(y)
        # the cache holds the history and every proposal but the last
        self.seen = history + out[:-1]
        return out


class LookupProposer:
    """Prompt lookup over the request's history (which grows by the accepted tokens)."""

    def __init__(self) -> None:
        self.index = NgramIndex()

    def propose(self, history: list[int], k: int) -> list[int]:
        self.index.follow(history)
        return self.index.propose(k)


class SpeculativeRun:
    """One request's decoding: `step()` runs one propose-and-verify round and returns the
    tokens it produced (1 to k+1). `cache` may hold the first tokens of `prompt` already."""

    def __init__(self, model: Any, proposer: Proposer, prompt: list[int], cache: list | None,
                 sampler: Any, processors: list, max_draft: int, prefill_step: int,
                 grammar: Constraint | None = None, eog: frozenset[int] = frozenset()) -> None:
        self.model, self.proposer = model, proposer
        self.grammar, self.eog = grammar, eog
        self.sampler, self.processors = sampler, processors
        self.max_draft, self.prefill_step = max_draft, prefill_step
        self.cache = cache if cache is not None else make_prompt_cache(model)
        check_trimmable(self.cache, "this model")
        self.tokens = list(prompt)
        self.cached = self.cache[0].offset if self.cache else 0  # prompt tokens in the cache
        # the last round's verification rows, as the model gave them: row i is the one its
        # i-th token was picked from (its logprob, if the request asked)
        self.rows: mx.array = mx.zeros((0, 0))
        self.draft_tokens = self.accepted_tokens = 0

    def step(self, budget: int) -> list[int]:
        """One round, producing at most `budget` tokens."""
        if self.cached < len(self.tokens) - 1:  # the prompt, all but its last token
            prefill(self.model, self.cache, self.tokens[self.cached:-1], self.prefill_step)
            self.cached = len(self.tokens) - 1
        k = min(self.max_draft, budget - 1)
        proposals = self.proposer.propose(self.tokens, k)[:k] if k > 0 else []
        if self.grammar is not None:
            proposals = proposals[:self.grammar.valid_prefix(proposals)]
        logits = self.model(mx.array([self.tokens[-1], *proposals])[None], cache=self.cache)[0]
        out = self._verify(logits, proposals)
        self.rows = logits[:len(out)]
        accepted = len(out) - 1
        trim_prompt_cache(self.cache, len(proposals) - accepted)
        self.tokens += out
        self.cached = len(self.tokens) - 1
        self.draft_tokens += len(proposals)
        self.accepted_tokens += accepted
        return out

    def _verify(self, logits: mx.array, proposals: list[int]) -> list[int]:
        """The model's own tokens at each position, up to and including the first that
        differs from the proposal there (or one past the last proposal)."""
        if self.sampler is None and not self.processors and self.grammar is None:
            # greedy: every position at once
            # a 1-d integer array's tolist(), which mlx types as any nested list or scalar
            picks = cast(list[int], mx.argmax(logits, axis=-1).tolist())
            n = 0
            while n < len(proposals) and picks[n] == proposals[n]:
                n += 1
            return picks[:n + 1]
        out: list[int] = []
        for i in range(len(proposals) + 1):
            row = logits[i:i + 1]
            context = mx.array((self.tokens + out)[-PENALTY_LAST_N:])
            for process in self.processors:
                row = process(context, row)
            if self.grammar is not None:
                row = apply_mask(self.grammar, row)
            logprobs = row - mx.logsumexp(row, axis=-1, keepdims=True)
            pick = mx.argmax(logprobs, axis=-1) if self.sampler is None else self.sampler(
                logprobs)
            out.append(token_id(pick))
            if self.grammar is not None and out[-1] not in self.eog:
                self.grammar.accept(out[-1])
            if i == len(proposals) or out[-1] != proposals[i]:
                break
        return out
