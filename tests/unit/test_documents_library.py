"""documents.db: attached documents outlive their files and a restart, pieces are embedded once
per embedding model, a question gets the documents whole when they fit and the best pieces
when they do not, and what an answer used is kept.

The embedder here is a word-hashing one (each word adds to one of 64 numbers): it tests the
store and the prompt assembly, not the quality of a real model's search, which
tests/integration/test_documents.py checks with all-MiniLM-L6-v2."""

from __future__ import annotations

import re
import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pytest
from fpdf import FPDF

from app.documents.context import DocumentContext
from app.documents.library import DocumentLibrary, DocumentLibraryError
from app.documents.pieces import Piece
from app.documents.reader import DocumentError, read_document


class WordHashEmbedder:
    """Deterministic, no model: a text's vector counts its words into 64 buckets."""
    dimensions = 64
    max_tokens = 60

    def __init__(self, model: str = "word-hash:1") -> None:
        self.model = model
        self.embedded: list[str] = []  # every text embed_documents was given

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dimensions, dtype=np.float32)
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            v[zlib.crc32(word.encode()) % self.dimensions] += 1
        return v / max(float(np.linalg.norm(v)), 1e-9)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.embedded += texts
        return np.stack([self._vector(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector(text)


TOPICS = ["bread baking flour yeast oven", "sailing wind harbour mast keel",
          "chess opening gambit bishop rook", "beekeeping hive honey queen swarm",
          "volcano lava magma crater ash", "violin bow string rosin concerto"]
FACT = "The maintenance code for the north turbine is 7391-KESTREL."


def write_book(path: Path, pages: int = 12, fact_page: int = 8) -> Path:
    """A PDF with one topic per page and the fact on `fact_page`."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for n in range(1, pages + 1):
        pdf.add_page()
        topic = TOPICS[n % len(TOPICS)]
        text = f"Chapter {n}. " + " ".join(f"{topic} notes {n}-{i}." for i in range(25))
        if n == fact_page:
            text += " " + FACT
        pdf.multi_cell(0, 6, text)
    pdf.output(str(path))
    return path


def words(text: str) -> int:
    return len(text.split())


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def library(tmp_path: Path) -> DocumentLibrary:
    return DocumentLibrary(tmp_path / "documents.db", read=read_document)


def test_an_attached_document_outlives_its_file_and_a_restart(tmp_path: Path):
    notes = tmp_path / "notes.md"
    notes.write_text("# Plan\n\nShip on Friday.\n", encoding="utf-8")
    lib = DocumentLibrary(tmp_path / "documents.db", read=read_document)
    attached = lib.attach(7, notes)
    assert (attached.conversation_id, attached.name, attached.kind, attached.pages,
            attached.characters) == (7, "notes.md", "markdown", None, 24)
    lib.close()
    notes.unlink()
    again = DocumentLibrary(tmp_path / "documents.db", read=read_document)
    assert again.documents(7) == [attached]
    assert again.documents(8) == []
    assert again.context_for(8, "anything?", 0, words) == DocumentContext(True, (), "", 0, 8)
    context = again.context_for(7, "when do we ship?", 1000, words)
    assert context.whole and context.pieces == (Piece("notes.md", "# Plan\n\nShip on Friday.\n",
                                                       None, 1, 3),)
    assert context.prompt_text.endswith("[notes.md, lines 1-3]\n# Plan\n\nShip on Friday.\n")
    assert context.tokens == words(context.prompt_text)


def test_a_file_that_cannot_be_read_stores_nothing(library: DocumentLibrary, tmp_path: Path):
    (tmp_path / "x.bin").write_bytes(b"\0\1\2" * 100)
    with pytest.raises(DocumentError, match="x.bin: is a binary file"):
        library.attach(1, tmp_path / "x.bin")
    assert library.documents(1) == []


def test_attaching_the_same_file_twice_keeps_one(library: DocumentLibrary, tmp_path: Path):
    (tmp_path / "a.txt").write_text("hello", encoding="utf-8")
    first = library.attach(1, tmp_path / "a.txt")
    assert library.attach(1, tmp_path / "a.txt") == first
    assert library.attach(2, tmp_path / "a.txt").id != first.id  # another chat's own copy
    library.detach(first.id)
    assert library.documents(1) == []


def test_documents_that_fit_go_in_whole_with_each_page_cited(library: DocumentLibrary,
                                                              tmp_path: Path):
    library.attach(1, write_book(tmp_path / "book.pdf", pages=3, fact_page=2))
    context = library.context_for(1, "what is the code?", 10_000, words)
    assert context.whole
    assert [p.citation() for p in context.pieces] == [f"book.pdf, page {n}" for n in (1, 2, 3)]
    assert context.prompt_text.startswith("The user attached these documents. When you use "
                                          "them, cite the source given in brackets, e.g. "
                                          "[book.pdf, page 1].")
    assert "[book.pdf, page 2]\nChapter 2." in context.prompt_text
    assert FACT in flat(context.prompt_text)  # the PDF's text wraps the line


def test_documents_that_do_not_fit_give_the_best_pieces_in_document_order(
        library: DocumentLibrary, tmp_path: Path):
    library.attach(1, write_book(tmp_path / "book.pdf"))
    (tmp_path / "other.txt").write_text("Turbine maintenance happens every spring.\n",
                                        encoding="utf-8")
    library.attach(1, tmp_path / "other.txt")
    embedder = WordHashEmbedder()
    progress: list[str] = []
    context = library.context_for(1, "What is the maintenance code for the north turbine?",
                                  120, words, embedder, progress.append)
    assert not context.whole
    assert context.tokens == words(context.prompt_text) <= 120
    cited = [p.citation() for p in context.pieces]
    assert "book.pdf, page 8" in cited
    assert FACT in flat(" ".join(p.text for p in context.pieces if p.page == 8))
    # in document order: the book's pieces by page, then the text file
    order = [(0 if p.document == "book.pdf" else 1, p.page or 0, p.line_start)
             for p in context.pieces]
    assert order == sorted(order)
    assert context.prompt_text.startswith("Excerpts of the user's attached documents")
    for piece in context.pieces:
        assert f"[{piece.citation()}]\n{piece.text}" in context.prompt_text
    assert progress[:2] == ["splitting book.pdf", "embedding book.pdf: 0/{} pieces".format(
        progress[-4].split("/")[1].split()[0])]
    assert re.fullmatch(r"embedding book\.pdf: (\d+)/\1 pieces", progress[-4])
    assert progress[-3:] == ["splitting other.txt", "embedding other.txt: 0/1 pieces",
                             "embedding other.txt: 1/1 pieces"]


def test_vectors_are_kept_and_only_a_new_embedding_model_embeds_again(tmp_path: Path):
    book = write_book(tmp_path / "book.pdf")
    lib = DocumentLibrary(tmp_path / "documents.db", read=read_document)
    lib.attach(1, book)
    first = WordHashEmbedder()
    question = "north turbine maintenance code"
    before = lib.context_for(1, question, 120, words, first)
    pieces = len(first.embedded)
    assert pieces > 12  # a dozen pages of ~2 pieces each
    lib.close()

    lib = DocumentLibrary(tmp_path / "documents.db", read=read_document)
    again = WordHashEmbedder()
    progress: list[str] = []
    assert lib.context_for(1, question, 120, words, again, progress.append) == before
    assert again.embedded == [] and progress == []  # read back, not embedded again

    other = WordHashEmbedder("word-hash:2")
    after = lib.context_for(1, question, 120, words, other)
    assert len(other.embedded) == pieces and after.pieces == before.pieces
    with sqlite3.connect(tmp_path / "documents.db") as db:
        models = db.execute("SELECT DISTINCT model FROM pieces").fetchall()
    assert models == [("word-hash:2",)]  # the old model's vectors are dropped


def test_an_interrupted_embedding_goes_on_where_it_stopped(library: DocumentLibrary,
                                                           tmp_path: Path):
    library.attach(1, write_book(tmp_path / "book.pdf", pages=40))

    class Failing(WordHashEmbedder):
        def embed_documents(self, texts: list[str]) -> np.ndarray:
            if len(self.embedded) >= 32:
                raise RuntimeError("the worker died")
            return super().embed_documents(texts)

    with pytest.raises(RuntimeError):
        library.context_for(1, "turbine code", 120, words, Failing())
    resumed = WordHashEmbedder()
    progress: list[str] = []
    library.context_for(1, "turbine code", 120, words, resumed, progress.append)
    total = int(progress[-1].split("/")[1].split()[0])
    assert progress[0] == f"embedding book.pdf: 32/{total} pieces"
    assert len(resumed.embedded) == total - 32


def test_without_an_embedder_too_much_text_names_the_model_to_install(
        library: DocumentLibrary, tmp_path: Path):
    library.attach(1, write_book(tmp_path / "book.pdf"))
    with pytest.raises(DocumentError) as caught:
        library.context_for(1, "code?", 100, words)
    message = str(caught.value)
    assert message.startswith("book.pdf: ")
    assert "more than the 100 the prompt has room for" in message
    assert "ember pull all-minilm-l6-v2" in message


def test_the_model_to_install_is_the_one_set_in_the_librarys_own_data_folder(tmp_path: Path):
    (tmp_path / "config.toml").write_text(
        '[documents]\nembedding_model = "nomic-embed-text-v1.5"\n', encoding="utf-8")
    # not $EMBER_HOME's folder
    library = DocumentLibrary(tmp_path / "documents.db", read=read_document)
    library.attach(1, write_book(tmp_path / "book.pdf"))
    with pytest.raises(DocumentError, match="ember pull nomic-embed-text-v1.5"):
        library.context_for(1, "code?", 100, words)


def test_a_budget_smaller_than_any_piece_says_so(library: DocumentLibrary, tmp_path: Path):
    library.attach(1, write_book(tmp_path / "book.pdf"))
    with pytest.raises(DocumentError, match="less than one piece; load the model with a "
                                            "larger context"):
        library.context_for(1, "code?", 30, words, WordHashEmbedder())


def test_what_an_answer_used_is_kept_after_detaching_and_forgotten_with_its_chat(
        tmp_path: Path):
    lib = DocumentLibrary(tmp_path / "documents.db", read=read_document)
    doc = lib.attach(3, write_book(tmp_path / "book.pdf"))
    context = lib.context_for(3, "north turbine code", 120, words, WordHashEmbedder())
    lib.record_use(41, context)
    assert lib.used_by(40) is None
    lib.detach(doc.id)
    lib.close()
    lib = DocumentLibrary(tmp_path / "documents.db", read=read_document)
    assert lib.used_by(41) == context
    lib.forget_conversation(3)
    assert lib.used_by(41) is None


def test_a_damaged_file_is_moved_aside_and_a_newer_one_refused(tmp_path: Path):
    path = tmp_path / "documents.db"
    path.write_bytes(b"this is not a database" * 100)
    lib = DocumentLibrary(path)
    assert lib.recovered_from is not None and lib.recovered_from.read_bytes().startswith(
        b"this is not a database")
    assert lib.documents(1) == []
    lib.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version=99")
    with pytest.raises(DocumentLibraryError, match="written by a newer Ember"):
        DocumentLibrary(path)
    assert path.exists()
