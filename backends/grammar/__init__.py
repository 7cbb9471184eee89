"""Constrained decoding: one grammar library (llguidance) for the llama.cpp, cuda and MLX
backends, so a JSON schema or a forced tool call means the same thing on each.

- `vocab`: an llguidance tokenizer from a backend's vocabulary (every token's bytes, the
  special tokens marked, the end-of-generation ids).
- `lark`: the grammar of an answer, as Lark text: JSON mode, a JSON schema, or tool calls in
  the model's own format (docs/wire-formats.md C.5), after the thinking when the model thinks.
- `constraint`: one request's grammar state: it masks that request's logits row, consumes
  each accepted token, and checks speculative proposals.
- `request`: the constraint a GenerationRequest needs, if any.

Why llguidance (measured on this machine, see docs/notes/constrained-decoding.md): a mask
over Qwen2.5's 151,936 tokens takes microseconds (Rust, a token trie and lexer-level
slicing), a grammar compiles in about a millisecond, JSON schemas and Lark grammars mix
(`%json` inside Lark), special tokens are grammar symbols, lazy lexemes give llama-server's
lazy tool-call grammars, and matchers roll back and validate token runs for speculation.
"""

from __future__ import annotations

from backends.grammar.constraint import Constraint
from backends.grammar.request import request_constraint
from backends.grammar.vocab import GrammarVocab, vocab_from_llama, vocab_from_pieces

__all__ = ["Constraint", "GrammarVocab", "request_constraint", "vocab_from_llama",
           "vocab_from_pieces"]
