"""all-MiniLM-L6-v2 as `ember pull` converts it, run by llama.cpp through the Runtime and
RuntimeEmbedder, against a forward pass of the same safetensors weights written here in
torch (with the model's own tokenizer.json read by `tokenizers`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from app.documents.embedder import RuntimeEmbedder
from app.runtime import Runtime
from app.store import InstalledModel, Store

SENTENCES = [
    "Paris is the capital of France.",
    "The cat sat on the mat and watched the rain.",
    "Quarterly revenue grew by 12% while costs fell.",
    "def add(a, b):\n    return a + b",
    "Photosynthesis turns light, water and carbon dioxide into sugar.",
]


def reference_embeddings(folder: Path, texts: list[str]) -> np.ndarray:
    """sentence-transformers' all-MiniLM-L6-v2 by hand: BERT (embeddings + LayerNorm, post-LN
    layers of self-attention and a GELU MLP), mean pooling over the attention mask, L2 norm.
    The texts go in one padded batch, so the mask matters."""
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    w = load_file(str(folder / "model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_truncation()
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    encoded = tok.encode_batch(texts)
    ids = torch.tensor([e.ids for e in encoded])
    mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.bool)
    batch, n = ids.shape
    heads, eps, width = cfg["num_attention_heads"], cfg["layer_norm_eps"], cfg["hidden_size"]

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (width,), w[name + ".weight"], w[name + ".bias"], eps)

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, w[name + ".weight"], w[name + ".bias"])

    x = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = norm(x, "embeddings.LayerNorm")
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (linear(x, p + f"attention.self.{m}").view(batch, n, heads, -1).transpose(1, 2)
                   for m in ("query", "key", "value"))
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        attended = attended.transpose(1, 2).reshape(batch, n, width)
        x = norm(x + linear(attended, p + "attention.output.dense"),
                 p + "attention.output.LayerNorm")
        hidden = F.gelu(linear(x, p + "intermediate.dense"))
        x = norm(x + linear(hidden, p + "output.dense"), p + "output.LayerNorm")
    pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    return F.normalize(pooled, dim=-1).numpy()


@pytest.fixture(scope="module")
def embedder(store: Store, minilm: InstalledModel) -> Iterator[RuntimeEmbedder]:
    with Runtime(store=store) as rt:
        yield RuntimeEmbedder(rt, minilm.ref)


def test_converted_model_embeds_as_the_original_weights_do(embedder, minilm_folder):
    ours = embedder.embed_documents(SENTENCES)
    reference = reference_embeddings(minilm_folder, SENTENCES)
    assert ours.shape == reference.shape == (5, 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * reference).sum(axis=1)
    assert cosines.min() >= 0.999, cosines  # F16 matrices: not bit for bit
    # more texts than one Runtime call carries: the rows stay in order across calls
    twice = embedder.embed_documents(SENTENCES * 2)
    np.testing.assert_allclose(twice, np.vstack([ours, ours]), atol=1e-6)


def test_llama_cpp_splits_words_as_the_models_own_tokenizer(embedder, minilm_folder):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm_folder / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    for text in [*SENTENCES, "Ünïcode naïve café, UPPER-case & co."]:
        expected = tok.encode(text).ids[1:-1]  # without [CLS] and [SEP]
        assert embedder._runtime.tokenize(embedder.model, text) == expected, text
        assert embedder.count_tokens(text) == len(expected)


def test_the_passage_that_answers_the_question_scores_highest(embedder):
    passages = ["Berlin is the largest city in Germany.",
                "Paris is the capital of France.",
                "The Eiffel Tower was finished in 1889.",
                "France produces a lot of wine and cheese.",
                "Madrid is the capital of Spain."]
    scores = embedder.embed_documents(passages) @ embedder.embed_query(
        "what is the capital of France")
    assert passages[int(np.argmax(scores))] == "Paris is the capital of France."


def test_a_piece_of_max_tokens_embeds_and_one_more_token_is_refused(embedder):
    from backends.errors import InvalidRequestError

    assert (embedder.model, embedder.dimensions, embedder.max_tokens) == (
        "all-minilm-l6-v2:F16", 384, 510)  # 512 positions less [CLS] and [SEP]
    word = "cat "
    assert embedder.count_tokens(word * 510) == 510
    assert embedder.embed_documents([word * 510]).shape == (1, 384)
    with pytest.raises(InvalidRequestError, match="513 tokens; Ember embeds at most 512"):
        embedder.embed_documents([word * 511])
    # a question longer than the model reads is embedded from its beginning
    assert np.allclose(embedder.embed_query(word * 600), embedder.embed_query(word * 510),
                       atol=1e-6)


def test_asking_the_embedding_model_to_generate_is_a_clear_error(embedder):
    from backends.base import GenerationRequest, Message
    from backends.errors import InvalidRequestError

    request = GenerationRequest(messages=(Message("user", "hello"),))
    with pytest.raises(InvalidRequestError, match="all-minilm-l6-v2:F16 is an embedding model: "
                                                  "it embeds text"):
        embedder._runtime.generate(embedder.model, request).result()
    assert embedder.embed_query("still embeds").shape == (384,)  # the worker lives on
