"""Whether a draft model may propose for a model: its token ids must mean the same text.

A draft proposes token ids, and the model verifies ids: with another tokenizer every proposal
means other text, and is rejected or, worse, accepted as the wrong word. Every backend checks
the same way, on each token's text by id (a backend reads them from its own tokenizer).
"""

from __future__ import annotations

from collections.abc import Sequence

from backends.errors import InvalidRequestError

# A model's vocabulary may be padded beyond its tokenizer (unused ids to round the embedding
# matrix); llama.cpp's speculative example tolerates this much (SPEC_VOCAB_MAX_SIZE_DIFFERENCE).
SIZE_SLACK = 128


def vocabulary_difference(model: Sequence[str | bytes], draft: Sequence[str | bytes],
                          slack: int = SIZE_SLACK) -> str | None:
    """Why `draft` (each token's text, by id) cannot propose for `model`; None if it can:
    sizes within `slack`, and every id both have means the same text."""
    if abs(len(model) - len(draft)) > slack:
        return f"{len(draft)} tokens against the model's {len(model)}"
    for i, (a, b) in enumerate(zip(model, draft, strict=False)):
        if a != b:
            return f"token {i} is {b!r} there and {a!r} here"
    return None


def check_draft_vocabulary(model: Sequence[str | bytes], draft: Sequence[str | bytes],
                           draft_name: str, model_special: tuple[int, ...] = (),
                           draft_special: tuple[int, ...] = ()) -> None:
    """Refuse a draft model whose tokens mean other text than the model's. `model_special`
    and `draft_special`: special token ids that must agree too (BOS, EOS), where known."""
    why = vocabulary_difference(model, draft)
    if why is None and model_special != draft_special:
        why = f"special tokens {draft_special} there and {model_special} here"
    if why is not None:
        raise InvalidRequestError(
            f"the draft model {draft_name} has another tokenizer ({why}): a draft that does "
            "not share the model's tokenizer proposes other text; pick a smaller model of "
            "the same family")
