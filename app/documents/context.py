"""What of a conversation's documents goes into the prompt, and the text it goes in as.

Documents that fit the budget go in whole; otherwise the pieces most like the question do, as
many as fit, in document order. Either way each piece is headed by its citation in brackets
("[report.pdf, page 12]"), and one line before them asks the model to cite those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.documents.pieces import Piece

WHOLE_INSTRUCTION = ("The user attached these documents. When you use them, cite the source "
                     "given in brackets, e.g. [{example}].")
PIECES_INSTRUCTION = ("Excerpts of the user's attached documents, those closest to the "
                      "question. When you use them, cite the source given in brackets, "
                      "e.g. [{example}].")
# How many of the best-scoring pieces are considered for the prompt (each is counted in the
# chat model's tokens, one call each); more than any context holds at ~250 tokens a piece.
MAX_CANDIDATES = 200


@dataclass(frozen=True)
class DocumentContext:
    whole: bool  # every attached document went into the prompt whole
    pieces: tuple[Piece, ...]  # what went into the prompt, in prompt order
    prompt_text: str  # the block put before the user's question, each piece headed by its citation
    tokens: int  # prompt_text's length in the chat model's tokens
    # the conversation it was made for (DocumentLibrary.record_use files it under it, so
    # forgetting the conversation forgets it too); None when there is none
    conversation_id: int | None = None


def prompt_text(pieces: Sequence[Piece], whole: bool) -> str:
    """The pieces, each headed by its citation, after one line asking for citations."""
    if not pieces:
        return ""
    instruction = WHOLE_INSTRUCTION if whole else PIECES_INSTRUCTION
    blocks = [instruction.format(example=pieces[0].citation())]
    blocks += [piece_block(p) for p in pieces]
    return "\n\n".join(blocks)


def piece_block(piece: Piece) -> str:
    return f"[{piece.citation()}]\n{piece.text}"


@dataclass(frozen=True)
class Candidate:
    """A stored piece with where it stands (for prompt order) and its score."""
    piece: Piece
    document_order: int  # the document's place among the conversation's (attach order)
    position: int  # the piece's place in its document
    score: float


def best_pieces(candidates: Sequence[Candidate], budget_tokens: int,
                count_tokens: Callable[[str], int],
                conversation_id: int | None = None) -> DocumentContext:
    """The best-scoring candidates that fit `budget_tokens` together (the instruction line
    included), in document order. A candidate too large for what is left is passed over for
    smaller ones after it."""
    ranked = sorted(candidates, key=lambda c: -c.score)[:MAX_CANDIDATES]
    if not ranked:
        return DocumentContext(False, (), "", 0, conversation_id)
    overhead = count_tokens(PIECES_INSTRUCTION.format(example=ranked[0].piece.citation())) + 2
    chosen: list[Candidate] = []
    used = overhead
    for candidate in ranked:
        cost = count_tokens(piece_block(candidate.piece)) + 2  # +2: the blank line between
        if used + cost <= budget_tokens:
            chosen.append(candidate)
            used += cost
    while True:
        ordered = sorted(chosen, key=lambda c: (c.document_order, c.position))
        pieces = tuple(c.piece for c in ordered)
        text = prompt_text(pieces, whole=False)
        tokens = count_tokens(text) if text else 0
        if tokens <= budget_tokens or not chosen:
            return DocumentContext(False, pieces, text, tokens, conversation_id)
        # tokens merge across the joins differently than counted alone: drop the weakest
        chosen.remove(min(chosen, key=lambda c: c.score))


def whole_context(pieces: Sequence[Piece], count_tokens: Callable[[str], int],
                  conversation_id: int | None = None) -> DocumentContext:
    text = prompt_text(pieces, whole=True)
    return DocumentContext(True, tuple(pieces), text, count_tokens(text) if text else 0,
                           conversation_id)
