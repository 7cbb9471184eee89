"""Cutting documents into pieces: each within the token limit, on one page, cut between
paragraphs or lines, and each knowing the lines it holds. Tokens here are words (a counter as
deterministic as a model's tokenizer, and easy to check by eye)."""

from __future__ import annotations

import pytest

from app.documents.pieces import Piece, split_document
from app.documents.reader import Document, Section


def words(text: str) -> int:
    return len(text.split())


def document(*sections: Section, name: str = "book.pdf") -> Document:
    return Document(name, f"/tmp/{name}", "pdf", "0" * 64, sections)


def numbered_lines(count: int, words_per_line: int = 9, start: int = 1) -> str:
    return "\n".join(" ".join([f"line{n}"] + ["word"] * (words_per_line - 1))
                     for n in range(start, start + count))


def test_citations_name_the_page_or_the_lines():
    assert Piece("report.pdf", "x", 12, 1, 5).citation() == "report.pdf, page 12"
    assert Piece("main.py", "x", None, 10, 42).citation() == "main.py, lines 10-42"
    assert Piece("main.py", "x", None, 7, 7).citation() == "main.py, line 7"
    assert Piece("memo.docx", "x", None, 3, 9).citation() == "memo.docx, paragraphs 3-9"


def test_pieces_fit_the_limit_and_never_cross_a_page():
    doc = document(Section(1, 1, numbered_lines(100)), Section(2, 1, numbered_lines(3, start=1)),
                   Section(3, 1, numbered_lines(60)))
    pieces = split_document(doc, words, max_tokens=100)
    assert all(words(p.text) <= 100 for p in pieces)
    assert {p.page for p in pieces} == {1, 2, 3}
    for piece in pieces:
        page_text = doc.sections[piece.page - 1].text.split("\n")
        # a piece is exactly its lines of its page
        assert piece.text == "\n".join(page_text[piece.line_start - 1:piece.line_end])
    # page 2 is small: one piece of all of it
    assert [(p.line_start, p.line_end) for p in pieces if p.page == 2] == [(1, 3)]
    # nothing is left out, and pieces are ~85 words, the target under a limit of 100
    on_page_1 = [p for p in pieces if p.page == 1]
    covered = {n for p in on_page_1 for n in range(p.line_start, p.line_end + 1)}
    assert covered == set(range(1, 101))
    assert all(70 <= words(p.text) <= 100 for p in on_page_1[:-1])


def test_consecutive_pieces_share_a_line_when_no_paragraph_ends_near_the_cut():
    doc = document(Section(1, 1, numbered_lines(80, words_per_line=15)))
    pieces = split_document(doc, words, max_tokens=200)  # overlap: up to 21 of ~170 tokens
    assert len(pieces) > 2
    for before, after in zip(pieces, pieces[1:], strict=False):
        assert after.line_start == before.line_end  # the last line again, not more


def test_a_paragraph_end_is_where_a_piece_ends():
    para = numbered_lines(5)  # 45 words
    text = "\n\n".join([para] * 4)  # paragraphs of lines 1-5, 7-11, 13-17, 19-23
    doc = document(Section(None, 1, text), name="notes.md")
    pieces = split_document(doc, words, max_tokens=120)
    assert [(p.line_start, p.line_end) for p in pieces] == [(1, 11), (13, 23)]
    assert all(p.page is None for p in pieces)


def test_line_numbers_count_from_the_sections_first_line():
    doc = document(Section(None, 41, numbered_lines(3)), name="part.txt")
    (piece,) = split_document(doc, words, max_tokens=100)
    assert (piece.line_start, piece.line_end) == (41, 43)
    assert piece.citation() == "part.txt, lines 41-43"


def test_a_page_that_is_one_long_line_is_cut_between_sentences():
    sentences = [f"Sentence {n} has exactly seven words here." for n in range(60)]
    doc = document(Section(5, 1, " ".join(sentences)))
    pieces = split_document(doc, words, max_tokens=50)
    assert len(pieces) > 5
    assert all(words(p.text) <= 50 and p.page == 5 for p in pieces)
    assert all((p.line_start, p.line_end) == (1, 1) for p in pieces)
    assert all(p.text.endswith(".") for p in pieces)  # whole sentences
    assert "".join(p.text + " " for p in pieces).split() == " ".join(sentences).split()


def test_a_piece_the_estimate_got_wrong_is_cut_until_it_fits():
    """Tokens per character vary within a page (numbers take more tokens than prose): a piece
    counted over the limit is halved, so the limit holds whatever the estimate said."""
    prose = "\n".join(["plain words in a line"] * 30)
    dense = "\n".join(["1 2 3 4 5 6 7 8 9 10 11 12 13 14 15"] * 30)  # 15 tokens in 35 chars
    doc = document(Section(1, 1, prose + "\n" + dense))
    pieces = split_document(doc, words, max_tokens=40)
    assert all(words(p.text) <= 40 for p in pieces)
    assert sum(words(p.text) for p in pieces) >= words(prose + dense)


def test_blank_pages_give_no_pieces_and_a_tiny_limit_is_an_error():
    doc = document(Section(1, 1, ""), Section(2, 1, "\n \n"), Section(3, 1, "text"))
    assert [p.page for p in split_document(doc, words, 100)] == [3]
    with pytest.raises(ValueError, match="too small"):
        split_document(doc, words, 4)
