"""A document cut into pieces small enough to embed, each knowing where it came from.

Pieces never cross a page (a citation names one page), are cut between paragraphs where one
ends near the cut, otherwise between lines, and share a few lines with the piece before so a
sentence on the cut is whole in one of them. A line too long for one piece (a PDF page with no
line breaks, minified code) is cut between sentences or words.

Tokens are the embedding model's. Counting every line through the model's tokenizer would cost
one call per line (a call into the model's worker process), so lines are measured by the
section's own tokens-per-character and each finished piece is counted once for real; a piece
over the limit is cut in two.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from app.documents.reader import Document, Section

# Pieces of about 200-250 tokens: large enough to hold a fact with its context, small enough
# that a few of them fit a small model's prompt and that one vector stands for one topic
# (sentence-transformers models such as all-MiniLM-L6-v2 were trained on texts up to 256).
TARGET_TOKENS = 256
TARGET_SHARE = 0.85  # of max_tokens: the estimate may be low by some percent
OVERLAP_TOKENS = 32
SAMPLE_CHARACTERS = 200_000  # how much of a long section is counted for its ratio


@dataclass(frozen=True)
class Piece:
    document: str  # the file's name
    text: str
    page: int | None
    line_start: int
    line_end: int

    def citation(self) -> str:
        """Where the piece is: "report.pdf, page 12" / "main.py, lines 10-42"."""
        if self.page is not None:
            return f"{self.document}, page {self.page}"
        # a .docx without page breaks has one paragraph per line
        unit = "paragraph" if self.document.lower().endswith(".docx") else "line"
        if self.line_start == self.line_end:
            return f"{self.document}, {unit} {self.line_start}"
        return f"{self.document}, {unit}s {self.line_start}-{self.line_end}"


@dataclass(frozen=True)
class _Unit:
    """A line, or a fragment of a long one."""
    line: int
    text: str
    joins_previous: bool  # a fragment after the first of its line: no line break before it


def split_document(doc: Document, count_tokens: Callable[[str], int],
                   max_tokens: int) -> list[Piece]:
    """`doc` as pieces of at most `max_tokens` tokens (`count_tokens`'), in document order."""
    if max_tokens < 8:
        raise ValueError(f"max_tokens {max_tokens} is too small for a piece")
    target = min(TARGET_TOKENS, int(max_tokens * TARGET_SHARE))
    pieces: list[Piece] = []
    for section in doc.sections:
        if section.text.strip():
            pieces += _split_section(doc.name, section, count_tokens, max_tokens, target)
    return pieces


def _split_section(name: str, section: Section, count_tokens: Callable[[str], int],
                   max_tokens: int, target: int) -> list[Piece]:
    sample = section.text[:SAMPLE_CHARACTERS]
    per_char = max(count_tokens(sample), 1) / max(len(sample), 1)

    def estimate(text: str) -> float:
        return len(text) * per_char + 1  # +1: the line break or word boundary

    units: list[_Unit] = []
    for i, line in enumerate(section.text.split("\n")):
        number = section.first_line + i
        if estimate(line) <= target:
            units.append(_Unit(number, line, False))
        else:
            units += [_Unit(number, f, j > 0)
                      for j, f in enumerate(_fragments(line, int(target / per_char * 0.9)))]

    overlap = min(OVERLAP_TOKENS, target / 8)
    chunks: list[list[_Unit]] = []
    chunk: list[_Unit] = []
    fresh = 0  # units of `chunk` not carried over from the chunk before
    size = 0.0
    for unit in units:
        cost = estimate(unit.text)
        if chunk and size + cost > target:
            if fresh:
                emitted, chunk, fresh = _cut(chunk, estimate, overlap)
                chunks.append(emitted)
            else:  # only the overlap so far, and the next unit is large: no overlap then
                chunk, fresh = [], 0
            size = sum(estimate(u.text) for u in chunk)
        chunk.append(unit)
        fresh += 1
        size += cost
    if fresh:
        chunks.append(chunk)

    pieces: list[Piece] = []
    for units_of_piece in chunks:
        pieces += _fitting(name, section.page, units_of_piece, count_tokens, max_tokens)
    return pieces


def _cut(chunk: list[_Unit], estimate: Callable[[str], float], overlap: float
         ) -> tuple[list[_Unit], list[_Unit], int]:
    """Where a full chunk ends, what the next one starts with, and how many of those units
    are new (not in a piece yet): at the last blank line in its second half (nothing shared:
    a paragraph ends there), or else at its end, the next starting with its last lines (up to
    `overlap` tokens) again."""
    for j in range(len(chunk) - 1, len(chunk) // 2 - 1, -1):
        if not chunk[j].text.strip() and j > 0:
            return chunk[:j], chunk[j + 1:], len(chunk) - j - 1
    carried: list[_Unit] = []
    size = 0.0
    for unit in reversed(chunk[1:]):
        size += estimate(unit.text)
        if size > overlap:
            break
        carried.insert(0, unit)
    return chunk, carried, 0


def _fitting(name: str, page: int | None, units: list[_Unit],
             count_tokens: Callable[[str], int], max_tokens: int) -> list[Piece]:
    """The units as one piece, or, counted over the limit, as two halves (each checked)."""
    while units and not units[0].text.strip():
        units = units[1:]
    while units and not units[-1].text.strip():
        units = units[:-1]
    if not units:
        return []
    text = _join(units).rstrip()  # a fragment cut after a sentence ends in its space
    if count_tokens(text) <= max_tokens:
        return [Piece(name, text, page, units[0].line, units[-1].line)]
    if len(units) == 1:
        unit = units[0]
        middle = len(unit.text) // 2
        halves = [_Unit(unit.line, unit.text[:middle], unit.joins_previous),
                  _Unit(unit.line, unit.text[middle:], True)]
        return (_fitting(name, page, halves[:1], count_tokens, max_tokens)
                + _fitting(name, page, halves[1:], count_tokens, max_tokens))
    middle = len(units) // 2
    return (_fitting(name, page, units[:middle], count_tokens, max_tokens)
            + _fitting(name, page, units[middle:], count_tokens, max_tokens))


def _join(units: list[_Unit]) -> str:
    text = units[0].text
    for unit in units[1:]:
        text += unit.text if unit.joins_previous else "\n" + unit.text
    return text


SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


def _fragments(line: str, max_chars: int) -> list[str]:
    """A long line in fragments of at most `max_chars`, cut after a sentence where one ends in
    the fragment's second half, else after a space, else anywhere. Joined, they give the line
    back exactly."""
    max_chars = max(max_chars, 16)
    fragments = []
    while len(line) > max_chars:
        window = line[:max_chars]
        cut = max((m.end() for m in SENTENCE_END.finditer(window)), default=0)
        if cut < max_chars // 2:
            cut = window.rfind(" ") + 1
        if cut < max_chars // 2:
            cut = max_chars
        fragments.append(line[:cut])
        line = line[cut:]
    fragments.append(line)
    return fragments
