"""Embeddings of document pieces and questions, for documents that do not fit the context.

`RuntimeEmbedder` runs the embedding model in its own worker, through the Runtime as every
other model (`Runtime.embed`: the llamacpp backend pools as the model's file says and
L2-normalises). Which model: `embedding_model_setting()`, the `[documents] embedding_model`
key of config.toml, all-MiniLM-L6-v2 by default (`ember pull all-minilm-l6-v2`).

The registry's entry names the model's query and document prefixes (nomic-embed-text wants
`search_query: ` / `search_document: `; MiniLM none); `max_tokens` is what a piece may have
so that, with the prefix and the model's own [CLS]/[SEP], it fits what the model reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np

from app.config import Paths, load_config
from app.errors import ConfigError
from app.registry import ModelSpec, load_registry
from backends.base import EMBED_MAX_TOKENS
from backends.errors import EmberError

if TYPE_CHECKING:
    from app.runtime import Runtime

DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"
CONFIG_TABLE, CONFIG_KEY = "documents", "embedding_model"
# Texts per Runtime.embed call: a call waits at most 120 s for its reply, and 32 pieces of
# 510 tokens took 42 s on two cores busy with other work (docs/notes/embeddings.md); 8 keep
# each call far from the limit, for a call overhead under 1 ms.
TEXTS_PER_CALL = 8


class Embedder(Protocol):
    @property
    def model(self) -> str: ...  # the installed model's ref, e.g. "all-minilm-l6-v2:F16"

    @property
    def dimensions(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...  # the most tokens one text may have (pieces must fit)

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...  # (n, dimensions) float32

    def embed_query(self, text: str) -> np.ndarray: ...  # (dimensions,) float32

    def count_tokens(self, text: str) -> int: ...  # in the embedding model's tokens


def embedding_model_setting(p: Paths | None = None) -> str:
    """The embedding model the user chose (`[documents] embedding_model` in config.toml), or
    DEFAULT_EMBEDDING_MODEL."""
    table = load_config(p).get(CONFIG_TABLE, {})
    if not isinstance(table, dict):
        raise ConfigError(f"config.toml: [{CONFIG_TABLE}] must be a table")
    value = table.get(CONFIG_KEY, DEFAULT_EMBEDDING_MODEL)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"config.toml: {CONFIG_TABLE}.{CONFIG_KEY} must be a model name such "
                          f"as {DEFAULT_EMBEDDING_MODEL!r}, got {value!r}")
    return value.strip()


class RuntimeEmbedder:
    """An `Embedder` on an installed model run by the Runtime. The model is looked up now (a
    missing one is a clear error naming `ember pull`) and loaded on the first embedding."""

    def __init__(self, runtime: Runtime, model: str) -> None:
        installed = runtime.store.get(model)
        self._runtime = runtime
        self.model = installed.ref
        spec = _registry_spec(installed.id)
        self.query_prefix = spec.query_prefix if spec else ""
        self.document_prefix = spec.document_prefix if spec else ""
        self._limit = min(EMBED_MAX_TOKENS, installed.context_length or EMBED_MAX_TOKENS)
        self._dimensions = 0
        self._max_tokens = 0
        self._added = 0  # tokens the model adds to every text

    @property
    def dimensions(self) -> int:
        self._probe()
        return self._dimensions

    @property
    def max_tokens(self) -> int:
        self._probe()
        return self._max_tokens

    def _probe(self) -> None:
        """One tiny embedding tells the vector's width and how many tokens the model adds to
        a text of its own (BERT's [CLS] and [SEP]); a piece gets what is left of the limit
        after those and the document prefix."""
        if self._dimensions:
            return
        vectors, read = self._runtime.embed(self.model, ["a"])
        added = read - self.count_tokens("a")
        prefix = self.count_tokens(self.document_prefix) if self.document_prefix else 0
        room = self._limit - added - prefix
        if room < 16:
            raise EmberError(f"{self.model} reads at most {self._limit} tokens per text, too "
                             "few for document pieces")
        self._dimensions, self._max_tokens, self._added = len(vectors[0]), room, added

    def count_tokens(self, text: str) -> int:
        return len(self._runtime.tokenize(self.model, text))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """One L2-normalised row per text (each at most `max_tokens` tokens), in order."""
        self._probe()
        rows = np.zeros((len(texts), self._dimensions), dtype=np.float32)
        for start in range(0, len(texts), TEXTS_PER_CALL):
            part = [self.document_prefix + t for t in texts[start:start + TEXTS_PER_CALL]]
            vectors, _ = self._runtime.embed(self.model, part)
            rows[start:start + len(part)] = np.asarray(vectors, dtype=np.float32)
        return rows

    def embed_query(self, text: str) -> np.ndarray:
        """The question's vector; a question longer than the model reads is embedded from its
        beginning (the model could not read the rest)."""
        self._probe()
        prefix = self.count_tokens(self.query_prefix) if self.query_prefix else 0
        text = _cut_to(text, self._limit - self._added - prefix, self.count_tokens)
        vectors, _ = self._runtime.embed(self.model, [self.query_prefix + text])
        return np.asarray(vectors[0], dtype=np.float32)


def _cut_to(text: str, room: int, count_tokens: Callable[[str], int]) -> str:
    """The longest beginning of `text` with at most `room` tokens (a binary search over its
    length: a dozen counts for a long question)."""
    if count_tokens(text) <= room:
        return text
    low, high = 0, len(text)  # text[:low] fits, text[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if count_tokens(text[:middle]) <= room:
            low = middle
        else:
            high = middle
    return text[:low]


def _registry_spec(model_id: str) -> ModelSpec | None:
    """The registry's entry of an installed model; None for an imported GGUF."""
    try:
        return load_registry().get(model_id)
    except EmberError:
        return None
