"""One request's grammar state: the mask of its next token, and the tokens it accepted.

Every engine uses it the same way: before sampling the request's logits row, `mask` (numpy)
or `allowed` (a boolean row for torch and MLX) leaves only tokens the grammar allows; after a
token is accepted, `accept` moves the state on. Speculative decoding cuts proposals at the
first token the grammar rejects (`valid_prefix`) and verifies position i under the state
after the first i proposals (`allowed_along`, which rolls back what it consumed).

llguidance never raises on a bad token: the matcher enters an error state. Should that
happen (a sampler that drew a masked token), the request may only end: the mask then allows
the end-of-generation tokens alone, and `error` says why.
"""

from __future__ import annotations

import logging

import llguidance
import numpy as np

from backends.grammar.vocab import GrammarVocab

log = logging.getLogger("ember.grammar")


class Constraint:
    def __init__(self, vocab: GrammarVocab, grammar: str) -> None:
        self.vocab = vocab
        self.grammar = grammar
        self.matcher = llguidance.LLMatcher(vocab.tokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise ValueError(self.matcher.get_error())
        self._bits = np.zeros((vocab.n_vocab + 31) // 32, dtype=np.int32)
        self._eog = np.array(sorted(vocab.eog), dtype=np.int64)
        self.error = ""

    # -- the mask ---------------------------------------------------------------------------
    def allowed(self) -> np.ndarray:
        """A boolean row over the vocabulary: the tokens the grammar allows next."""
        if self.matcher.is_error():
            ok = np.zeros(self.vocab.n_vocab, dtype=bool)
            ok[self._eog] = True
            return ok
        self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
        return bits[:self.vocab.n_vocab].view(bool)

    def mask(self, logits: np.ndarray) -> None:
        """Set the logits of the tokens the grammar forbids to -inf, in place (one row;
        columns past the vocabulary's width are forbidden too)."""
        ok = self.allowed()
        width = min(len(ok), logits.shape[-1])
        logits[..., :width][..., ~ok[:width]] = -np.inf
        logits[..., width:] = -np.inf

    # -- moving on --------------------------------------------------------------------------
    def accept(self, token: int) -> bool:
        """The request took `token` (not an end-of-generation token: the engine ends the
        request on those). False if the grammar did not allow it."""
        if self.matcher.consume_token(token):
            return True
        if not self.error:
            self.error = self.matcher.get_error() or f"token {token} was not allowed"
            log.warning("grammar: %s", self.error)
        return False

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of `tokens` (proposed next tokens, in order) the grammar allows."""
        if not tokens or self.matcher.is_error():
            return 0
        return self.matcher.validate_tokens(tokens)

    def allowed_along(self, tokens: list[int]) -> list[np.ndarray]:
        """The allowed rows now and after each of `tokens` (a valid prefix): len + 1 rows;
        the state is left where it was."""
        rows = [self.allowed().copy()]
        for n, token in enumerate(tokens, 1):
            if not self.matcher.consume_token(token):
                self.matcher.rollback(n - 1)  # an error state rolls back too
                raise ValueError(f"proposal token {token} is not allowed (check valid_prefix)")
            rows.append(self.allowed().copy())
        if tokens:
            self.matcher.rollback(len(tokens))
        return rows

    @property
    def done(self) -> bool:
        """The grammar is complete: only the end of generation is allowed."""
        return self.matcher.is_stopped()
