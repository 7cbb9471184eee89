"""An llguidance tokenizer from a backend's own vocabulary.

llguidance computes masks from every token's bytes; special (control) tokens carry a 0xFF
prefix so that no text can spell them, and a grammar names them `<[id]>`. The end-of-
generation ids are the grammar's EOS: allowed exactly where the grammar may end.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import llguidance

SPECIAL_PREFIX = b"\xff"  # llguidance's mark of a special token's bytes


@dataclass(frozen=True)
class GrammarVocab:
    """A backend's vocabulary as the grammar sees it. `n_vocab` is the width of the
    model's logits rows (it may exceed the tokenizer's size: padded embeddings)."""
    tokenizer: llguidance.LLTokenizer
    n_vocab: int
    eog: frozenset[int]
    specials: dict[str, int] = field(default_factory=dict)  # by text, where given

    def special_id(self, text: str) -> int | None:
        """The id of `text` when it is one special token of this vocabulary."""
        if text in self.specials:
            return self.specials[text]
        ids = self.tokenizer.tokenize_str(text, parse_special=True)
        if len(ids) == 1 and self.tokenizer.is_special_token(ids[0]):
            return ids[0]
        return None


def vocab_from_llama(vocab: Any, n_vocab: int | None = None) -> GrammarVocab:
    """From a llama.cpp vocabulary (`llama_model_get_vocab`, or LlamaModel.vocab), which must
    outlive the result (llguidance tokenizes through it). About a second for 150k tokens:
    a backend builds it once per loaded model."""
    import llama_cpp
    from llguidance.llamacpp import lltokenizer_from_vocab

    size = llama_cpp.llama_vocab_n_tokens(vocab)
    eog = frozenset(i for i in range(size) if llama_cpp.llama_vocab_is_eog(vocab, i))
    width = max(n_vocab or size, size)
    with warnings.catch_warnings():  # it calls llama_token_get_attr, deprecated, per token
        warnings.simplefilter("ignore", DeprecationWarning)
        tok = lltokenizer_from_vocab(vocab, n_vocab=width, eos_token=sorted(eog))
    return GrammarVocab(tok, width, eog)


class _PiecesTokenizer:
    """What llguidance.TokenizerWrapper reads: token bytes, EOS, and a tokenize call."""

    def __init__(self, tokens: list[bytes], eos: int, special: list[int],
                 encode: Callable[[str], list[int]]) -> None:
        self.tokens, self.eos_token_id, self.bos_token_id = tokens, eos, None
        self.special_token_ids = special
        self._encode = encode

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._encode(text)


def vocab_from_pieces(pieces: list[bytes], special: dict[int, str], eog: Iterable[int],
                      encode: Callable[[str], list[int]], n_vocab: int | None = None
                      ) -> GrammarVocab:
    """From each token's bytes (`pieces`, by id), the special tokens' texts by id, the
    end-of-generation ids, and the model's tokenizer (plain text to ids, no special-token
    parsing needed). For MLX directories and Hugging Face tokenizers."""
    width = max(n_vocab or len(pieces), len(pieces))
    tokens = list(pieces) + [b""] * (width - len(pieces))
    for i, text in special.items():
        if 0 <= i < width:
            tokens[i] = SPECIAL_PREFIX + text.encode("utf-8")
    ends = sorted(set(eog))
    if not ends:
        raise ValueError("a vocabulary without an end-of-generation token")
    wrapper = llguidance.TokenizerWrapper(
        _PiecesTokenizer(tokens, ends[0], sorted(special), encode))
    tok = llguidance.LLTokenizer(wrapper, n_vocab=width, eos_token=ends)
    return GrammarVocab(tok, width, frozenset(ends),
                        {text: i for i, text in special.items() if 0 <= i < width})
