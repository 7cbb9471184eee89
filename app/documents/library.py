"""The documents attached to conversations, in `documents.db` beside history.db.

A document's text is stored when it is attached (its sections), so the chat keeps working if
the file is moved or deleted. Pieces and their vectors are made the first time a question needs
them (documents that fit the prompt whole never need them) and kept, under the embedding
model's ref: another model splits and embeds again. Vectors are saved batch by batch, so an
embedding run that is stopped goes on where it stopped.

Search is cosine similarity in numpy over the conversation's vectors (unit length, so a dot
product). Measured with benchmarks/document_search.py for 10,000 x 384 float32 vectors, the
top 20, on the shared 2-core x86-64 machine (medians, load average 3-4): numpy reads the BLOBs
from SQLite and searches them in 19-42 ms (the product alone, in memory: 0.3-1 ms);
sqlite-vec 0.1.9's `vec0` KNN query takes 7-8 ms, its `vec_distance_cosine` scan 14 ms, with
the same top 20. Tens of milliseconds either way, against seconds to embed the question and
answer it, so sqlite-vec buys nothing that matters at a conversation's size (thousands of
pieces, not millions), and it is a native extension that Python's sqlite3 must be allowed to
load: the Python Ember is developed and bundled with (pyenv's 3.11 build) has no
`enable_load_extension`, so it could not load it at all. numpy it is.

Same manners as app/history.py: WAL, one transaction per change, a damaged file is moved
aside (never deleted) and a new one started, the schema's version in SQLite's user_version.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.documents.context import (
    Candidate,
    DocumentContext,
    best_pieces,
    prompt_text,
    whole_context,
)
from app.documents.isolated import read_isolated
from app.documents.pieces import Piece, split_document
from app.documents.reader import Document, DocumentError, Section
from app.sqlite_file import connect, open_or_set_aside
from backends.errors import EmberError

if TYPE_CHECKING:
    from app.documents.embedder import Embedder

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    path TEXT NOT NULL,
    kind TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    pages INTEGER,
    characters INTEGER NOT NULL,
    added_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_by_conversation ON documents(conversation_id, id);
CREATE TABLE IF NOT EXISTS sections (
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    page INTEGER,
    first_line INTEGER NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (document_id, position)
);
-- a document's pieces as one embedding model cut them (its tokens, its longest text), with
-- that model's vector of each: float32, unit length; NULL until embedded
CREATE TABLE IF NOT EXISTS pieces (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    position INTEGER NOT NULL,
    page INTEGER,
    line_start INTEGER NOT NULL,
    line_end INTEGER NOT NULL,
    text TEXT NOT NULL,
    vector BLOB,
    UNIQUE (document_id, model, position)
);
-- what went into the prompt of an assistant message (history.db's message id): a copy, so it
-- outlives a detached document
CREATE TABLE IF NOT EXISTS uses (
    message_id INTEGER PRIMARY KEY,
    conversation_id INTEGER,
    whole INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    pieces TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS uses_by_conversation ON uses(conversation_id);
"""
EMBED_BATCH = 32  # texts per call into the embedding model's worker; progress after each


class DocumentLibraryError(EmberError):
    pass


@dataclass(frozen=True)
class AttachedDocument:
    id: int
    conversation_id: int
    name: str
    kind: str
    pages: int | None
    characters: int
    added_at: float


def _attached(row: sqlite3.Row) -> AttachedDocument:
    return AttachedDocument(row["id"], row["conversation_id"], row["name"], row["kind"],
                            row["pages"], row["characters"], row["added_at"])


def _rowid(cur: sqlite3.Cursor) -> int:
    assert cur.lastrowid is not None
    return cur.lastrowid


def _piece(row: sqlite3.Row, name: str) -> Piece:
    return Piece(name, row["text"], row["page"], row["line_start"], row["line_end"])


class DocumentLibrary:
    """The store of attached documents. Safe to use from several threads (one connection, a
    lock); the long work (embedding) runs outside the lock."""

    def __init__(self, path: Path, read: Callable[[Path], Document] = read_isolated) -> None:
        """`read`: how a file becomes a Document; by default a PDF or .docx is parsed in a
        child process bounded in time and memory (app.documents.isolated)."""
        self.path = path
        self._read = read
        self._lock = threading.Lock()
        # a damaged file is kept under another name (recovered_from), a new one started (the
        # documents can be attached again; history.db is another file, untouched)
        self._db, self.recovered_from = open_or_set_aside(path, self._open)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        db = connect(path)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            db.close()
            raise DocumentLibraryError(f"{path} was written by a newer Ember (schema "
                                       f"{version}); update Ember to open it")
        if version == 0:
            # all tables and the version in one transaction, or none
            db.executescript(f"BEGIN IMMEDIATE;{SCHEMA}PRAGMA user_version={SCHEMA_VERSION};"
                             "COMMIT;")
        return db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # documents

    def attach(self, conversation_id: int, path: Path) -> AttachedDocument:
        """Read `path` and keep its text under the conversation. DocumentError when it cannot
        be read (nothing is stored). The same file attached again is the same document."""
        doc = self._read(path)
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM documents WHERE conversation_id=? AND sha256=? AND name=?",
                (conversation_id, doc.sha256, doc.name)).fetchone()
            if row is not None:
                return _attached(row)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cur = self._db.execute(
                    "INSERT INTO documents(conversation_id, name, path, kind, sha256, pages,"
                    " characters, added_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (conversation_id, doc.name, doc.path, doc.kind, doc.sha256, doc.pages,
                     doc.characters, time.time()))
                document_id = _rowid(cur)
                self._db.executemany(
                    "INSERT INTO sections(document_id, position, page, first_line, text)"
                    " VALUES (?, ?, ?, ?, ?)",
                    [(document_id, i, s.page, s.first_line, s.text)
                     for i, s in enumerate(doc.sections)])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            row = self._db.execute("SELECT * FROM documents WHERE id=?",
                                   (document_id,)).fetchone()
        return _attached(row)

    def documents(self, conversation_id: int) -> list[AttachedDocument]:
        """In the order they were attached."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM documents WHERE conversation_id=? ORDER BY id",
                                    (conversation_id,)).fetchall()
        return [_attached(r) for r in rows]

    def document(self, document_id: int) -> Document:
        """The stored text of an attached document, as it was read."""
        with self._lock:
            row = self._db.execute("SELECT * FROM documents WHERE id=?",
                                   (document_id,)).fetchone()
            if row is None:
                raise DocumentLibraryError(f"no attached document {document_id}")
            sections = self._db.execute(
                "SELECT page, first_line, text FROM sections WHERE document_id=?"
                " ORDER BY position", (document_id,)).fetchall()
        return Document(row["name"], row["path"], row["kind"], row["sha256"],
                        tuple(Section(s["page"], s["first_line"], s["text"]) for s in sections))

    def detach(self, document_id: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM documents WHERE id=?", (document_id,))

    def forget_conversation(self, conversation_id: int) -> None:
        """Drop the conversation's documents and the records of what its answers used."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM documents WHERE conversation_id=?", (conversation_id,))
            self._db.execute("DELETE FROM uses WHERE conversation_id=?", (conversation_id,))
            self._db.execute("COMMIT")

    # the prompt

    def context_for(self, conversation_id: int, question: str, budget_tokens: int,
                    count_tokens: Callable[[str], int], embedder: Embedder | None = None,
                    on_progress: Callable[[str], None] | None = None) -> DocumentContext:
        """What of the conversation's documents goes before `question`, in at most
        `budget_tokens` of the chat model's tokens (`count_tokens`): all of them whole when
        they fit, else the pieces closest to the question, found with `embedder` (embedding
        any pieces not embedded yet, reported through `on_progress`)."""
        attached = self.documents(conversation_id)
        if not attached:
            return DocumentContext(True, (), "", 0, conversation_id)
        docs = [self.document(a.id) for a in attached]
        whole = whole_context([p for d in docs for p in _whole_pieces(d)], count_tokens,
                              conversation_id)
        if whole.tokens <= budget_tokens:
            return whole
        names = _names([d.name for d in docs])
        if embedder is None:
            from app.config import Paths
            from app.documents.embedder import embedding_model_setting

            # the setting of the data folder this library lives in (not only $EMBER_HOME's)
            model = embedding_model_setting(Paths(self.path.parent))
            raise DocumentError(names, f"{whole.tokens:,} tokens of text, more than the "
                                       f"{budget_tokens:,} the prompt has room for, so Ember "
                                       "searches them for what the question needs with the "
                                       f"embedding model {model}, which is not installed: "
                                       f"install it with `ember pull {model}` (or on the "
                                       "Models page)")
        progress = on_progress or (lambda message: None)
        candidates = []
        for order, (document, doc) in enumerate(zip(attached, docs, strict=True)):
            rows = self._embedded_pieces(document.id, doc, embedder, progress)
            candidates += [(order, row) for row in rows]
        if not candidates:
            return DocumentContext(False, (), "", 0, conversation_id)
        vectors = np.frombuffer(b"".join(r["vector"] for _, r in candidates),
                                dtype=np.float32).reshape(len(candidates), embedder.dimensions)
        scores = vectors @ np.asarray(embedder.embed_query(question), dtype=np.float32)
        name_of = {order: doc.name for order, doc in enumerate(docs)}
        context = best_pieces(
            [Candidate(_piece(row, name_of[order]), order, row["position"], float(score))
             for (order, row), score in zip(candidates, scores, strict=True)],
            budget_tokens, count_tokens, conversation_id)
        if not context.pieces:
            raise DocumentError(names, f"the prompt has room for {budget_tokens:,} tokens of "
                                       "them, less than one piece; load the model with a "
                                       "larger context")
        return context

    def _embedded_pieces(self, document_id: int, doc: Document, embedder: Embedder,
                         progress: Callable[[str], None]) -> list[sqlite3.Row]:
        """The document's pieces for `embedder`'s model, each with its vector: cut and
        embedded now where they are not stored yet."""
        model = embedder.model
        size = embedder.dimensions * 4
        with self._lock:
            stored = self._db.execute(
                "SELECT COUNT(*), SUM(vector IS NOT NULL AND length(vector)<>?) FROM pieces"
                " WHERE document_id=? AND model=?", (size, document_id, model)).fetchone()
        if stored[0] == 0 or stored[1]:  # none yet, or vectors of another size: cut again
            progress(f"splitting {doc.name}")
            pieces = split_document(doc, embedder.count_tokens, embedder.max_tokens)
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    # pieces of another model (or size) are of no further use
                    self._db.execute("DELETE FROM pieces WHERE document_id=?", (document_id,))
                    self._db.executemany(
                        "INSERT INTO pieces(document_id, model, position, page, line_start,"
                        " line_end, text) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [(document_id, model, i, p.page, p.line_start, p.line_end, p.text)
                         for i, p in enumerate(pieces)])
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
        with self._lock:
            missing = self._db.execute(
                "SELECT id, text FROM pieces WHERE document_id=? AND model=? AND vector IS NULL"
                " ORDER BY position", (document_id, model)).fetchall()
            total = self._db.execute("SELECT COUNT(*) FROM pieces WHERE document_id=? AND"
                                     " model=?", (document_id, model)).fetchone()[0]
        done = total - len(missing)
        for start in range(0, len(missing), EMBED_BATCH):
            batch = missing[start:start + EMBED_BATCH]
            progress(f"embedding {doc.name}: {done}/{total} pieces")
            vectors = np.asarray(embedder.embed_documents([r["text"] for r in batch]),
                                 dtype=np.float32)
            if vectors.shape != (len(batch), embedder.dimensions):
                raise DocumentLibraryError(
                    f"{model} gave vectors of shape {vectors.shape} for {len(batch)} pieces; "
                    f"expected {embedder.dimensions} numbers each")
            with self._lock:
                self._db.executemany("UPDATE pieces SET vector=? WHERE id=?",
                                     [(v.tobytes(), r["id"]) for v, r in
                                      zip(vectors, batch, strict=True)])
            done += len(batch)
        if missing:
            progress(f"embedding {doc.name}: {done}/{total} pieces")
        with self._lock:
            return self._db.execute(
                "SELECT position, page, line_start, line_end, text, vector FROM pieces"
                " WHERE document_id=? AND model=? ORDER BY position",
                (document_id, model)).fetchall()

    # what answers used

    def record_use(self, message_id: int, context: DocumentContext) -> None:
        """Remember which pieces the answer `message_id` (history.db's) was given."""
        pieces = json.dumps([asdict(p) for p in context.pieces])
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO uses(message_id, conversation_id, whole, tokens, pieces)"
                " VALUES (?, ?, ?, ?, ?)",
                (message_id, context.conversation_id, int(context.whole), context.tokens,
                 pieces))

    def used_by(self, message_id: int) -> DocumentContext | None:
        """What record_use kept for `message_id`; None for an answer given no documents."""
        with self._lock:
            row = self._db.execute("SELECT * FROM uses WHERE message_id=?",
                                   (message_id,)).fetchone()
        if row is None:
            return None
        pieces = tuple(Piece(**p) for p in json.loads(row["pieces"]))
        whole = bool(row["whole"])
        return DocumentContext(whole, pieces, prompt_text(pieces, whole), row["tokens"],
                               row["conversation_id"])


def _whole_pieces(doc: Document) -> list[Piece]:
    """Each section of `doc` as one piece (a page, or a whole text file)."""
    # a file's last line ends with a newline: that is not one more line
    return [Piece(doc.name, s.text, s.page, s.first_line,
                  s.first_line + s.text.rstrip("\n").count("\n"))
            for s in doc.sections if s.text.strip()]


def _names(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    return f"{names[0]} and {len(names) - 1} more"
