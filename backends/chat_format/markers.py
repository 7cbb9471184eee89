"""Marker tokens shown as text. Backends detokenize with special tokens hidden, so that
`<|im_end|>` and its kind never reach the answer; but a format's markers can be control
tokens too (harmony's `<|channel|>`, Llama's `<|python_tag|>`, Mistral's `[TOOL_CALLS]`), and
the output parser must see those. Each backend asks for these pieces at load and uses them
before its usual detokenizing."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def marker_pieces(markers: Sequence[str],
                  tokenize: Callable[[str], list[int]]) -> dict[int, bytes]:
    """Token id -> text, for each marker that is a single token of the vocabulary
    (`tokenize` must read special-token text as those tokens)."""
    pieces: dict[int, bytes] = {}
    for marker in markers:
        ids = tokenize(marker)
        if len(ids) == 1:
            pieces[ids[0]] = marker.encode("utf-8")
    return pieces
