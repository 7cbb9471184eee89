"""Conversations in SQLite, written so that no kill can lose what was already said.

WAL journal, one transaction per change: a message is durable the moment `add_message`
returns. A streamed answer is stored as status "streaming" when it starts and its text is
saved as it grows; whatever is still "streaming" when the history is next opened was cut off
by a crash or a kill, and is marked "interrupted" (kept, never dropped).

Deleting a conversation only marks it deleted, so it can be undone; `purge_deleted` removes
those marked a while ago.

Messages form a tree: each has a parent (None for the first turn), and editing a message or
regenerating an answer adds a sibling instead of dropping the old version. Each message
remembers which of its children is shown (the conversation, which of its first turns), so the
shown path, root to leaf, is what the window shows and what the model is given; switching to
another version shows the path that version had below it (app.history_tree).

An assistant turn keeps its thinking (`reasoning`) and the tool calls it made apart from its
answer, and a tool result its call's id and tool name, so the model is given them back the way
its template expects (docs/wire-formats.md C.7). The schema's version is SQLite's user_version;
opening an older file migrates it in one transaction (MIGRATIONS), keeping every row.

A question's images (and audio) are files in the data folder, `media/<sha256>.<ext>`, the
bytes as the user gave them, content-addressed (the same screenshot twice is one file) and
written atomically; table `message_media` says which message holds which, in order. A file
goes only when no message of any conversation holds it any more (`purge_deleted`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # (no py.typed)

from app.history_tree import Version, shown_path, versions
from app.sqlite_file import connect, open_or_set_aside
from backends.base import ToolCall
from backends.errors import EmberError

SCHEMA_VERSION = 4
# Version 1, as every history.db before tool calls and thinking was created. A new file is
# created as version 1 and migrated like an old one, so both end with the same schema.
SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    model TEXT,
    system_prompt TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    deleted_at REAL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'complete',
    stats TEXT,
    model TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""
# MIGRATIONS[n] takes a version-n file to version n+1. Only ADD COLUMN, UPDATEs that fill
# the new columns, and new tables: the old columns stay as they are, byte for byte.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE messages ADD COLUMN tool_calls TEXT",  # JSON [{id, name, arguments}]
        "ALTER TABLE messages ADD COLUMN tool_call_id TEXT",  # a tool result's call
        "ALTER TABLE messages ADD COLUMN tool_name TEXT",  # a tool result's tool
        # the conversation's Think setting: NULL (the model's default), off, on, low,
        # medium or high
        "ALTER TABLE conversations ADD COLUMN thinking TEXT",
    ),
    2: (
        # the message tree: an existing conversation becomes one path, each message the child
        # of the one before it, each shown child the one after it
        "ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages(id)"
        " ON DELETE CASCADE",
        "ALTER TABLE messages ADD COLUMN shown_child_id INTEGER",
        "ALTER TABLE conversations ADD COLUMN shown_root_id INTEGER",
        "ALTER TABLE conversations ADD COLUMN preset TEXT",  # app.presets: the chat's preset
        "UPDATE messages SET parent_id=(SELECT MAX(p.id) FROM messages p WHERE"
        " p.conversation_id=messages.conversation_id AND p.id<messages.id),"
        " shown_child_id=(SELECT MIN(c.id) FROM messages c WHERE"
        " c.conversation_id=messages.conversation_id AND c.id>messages.id)",
        "UPDATE conversations SET shown_root_id=(SELECT MIN(m.id) FROM messages m WHERE"
        " m.conversation_id=conversations.id)",
        "CREATE INDEX IF NOT EXISTS messages_by_parent ON messages(parent_id)",
    ),
    3: (
        # a question's images and audio, in order: files media/<sha256>.<ext> (app.history)
        "CREATE TABLE message_media (message_id INTEGER NOT NULL REFERENCES messages(id)"
        " ON DELETE CASCADE, position INTEGER NOT NULL, kind TEXT NOT NULL,"
        " sha256 TEXT NOT NULL, ext TEXT NOT NULL, PRIMARY KEY (message_id, position))",
        "CREATE INDEX message_media_by_file ON message_media(sha256)",
    ),
}
MEDIA_KINDS = ("image", "audio")
MEDIA_NAME = re.compile(r"^(?P<sha>[0-9a-f]{64})\.(?P<ext>[a-z0-9]{1,5})$")
# a file written by store_media is held by no message until add_message commits: a purge
# in another process in between must not take it
UNUSED_MEDIA_GRACE_S = 600.0
# The MCP servers switched on in each conversation (app.mcp): a table of its own, created
# where missing, so it needs no schema version of its own and no other table changes.
MCP_SERVERS_TABLE = """
CREATE TABLE IF NOT EXISTS conversation_mcp_servers (
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    server TEXT NOT NULL,
    PRIMARY KEY (conversation_id, server)
);
"""
# who is writing each streamed answer: a History opened by another process leaves a live
# answer alone, and marks "interrupted" only those whose writing process is gone
STREAM_WRITERS_TABLE = """
CREATE TABLE IF NOT EXISTS stream_writers (
    message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
    pid INTEGER NOT NULL,
    started REAL NOT NULL
);
"""
THINKING_SETTINGS = ("off", "on", "low", "medium", "high")
STATUSES = ("complete", "streaming", "interrupted", "stopped", "error")


class HistoryError(EmberError):
    pass


class Leaf:
    """add_message's default parent: the shown path's last message."""


LEAF = Leaf()


@dataclass(frozen=True)
class _Node:
    id: int
    parent_id: int | None
    shown_child_id: int | None


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    model: str | None
    system_prompt: str
    created_at: float
    updated_at: float
    deleted_at: float | None = None
    thinking: str | None = None  # one of THINKING_SETTINGS; None: the model's default
    shown_root_id: int | None = None  # which first turn is shown (the tree's roots)
    preset: str | None = None  # the chat's preset (app.presets); None: the app's settings


@dataclass(frozen=True)
class StoredMedia:
    """One image or audio clip of a message: the file `media/<sha256>.<ext>`."""
    kind: str  # image | audio
    sha256: str
    ext: str  # png, jpeg, gif, webp, bmp; wav, mp3, flac

    @property
    def name(self) -> str:
        return f"{self.sha256}.{self.ext}"


@dataclass(frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    content: str
    status: str  # complete | streaming | interrupted | stopped | error
    stats: dict | None
    model: str | None
    created_at: float
    reasoning: str = ""  # an assistant turn's thinking
    tool_calls: tuple[ToolCall, ...] = ()  # the calls an assistant turn made
    tool_call_id: str | None = None  # a tool result: the call it answers
    tool_name: str | None = None  # a tool result: the tool that was called
    parent_id: int | None = None  # the turn before this one (None: a first turn)
    shown_child_id: int | None = None  # which of the turns after it is shown
    media: tuple[StoredMedia, ...] = ()  # a question's images and audio, in order


_STARTED = psutil.Process().create_time()  # with the pid: which process wrote an answer


def writer_alive(pid: int, started: float) -> bool:
    """Whether the process that began writing an answer still runs (its pid, and its start
    time, so that a pid reused since does not count)."""
    try:
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.AccessDenied:
        return True  # it runs, as another user
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def _conversation(row: sqlite3.Row) -> Conversation:
    return Conversation(row["id"], row["title"], row["model"], row["system_prompt"],
                        row["created_at"], row["updated_at"], row["deleted_at"],
                        row["thinking"], row["shown_root_id"], row["preset"])


def _rowid(cur: sqlite3.Cursor) -> int:
    """The id an INSERT gave its row (always set after one)."""
    assert cur.lastrowid is not None
    return cur.lastrowid


def _calls_json(calls: tuple[ToolCall, ...]) -> str | None:
    return json.dumps([{"id": c.id, "name": c.name, "arguments": c.arguments}
                       for c in calls]) if calls else None


def _message(row: sqlite3.Row, media: tuple[StoredMedia, ...] = ()) -> StoredMessage:
    stats = json.loads(row["stats"]) if row["stats"] else None
    calls = tuple(ToolCall(c["id"], c["name"], c["arguments"])
                  for c in json.loads(row["tool_calls"] or "[]"))
    return StoredMessage(row["id"], row["conversation_id"], row["role"], row["content"],
                         row["status"], stats, row["model"], row["created_at"],
                         row["reasoning"], calls, row["tool_call_id"], row["tool_name"],
                         row["parent_id"], row["shown_child_id"], media)


def _check_media(media: tuple[StoredMedia, ...]) -> None:
    for m in media:
        if m.kind not in MEDIA_KINDS or not MEDIA_NAME.match(m.name):
            raise HistoryError(f"not a stored media file: {m.kind} {m.name!r}")


def _insert_media(db: sqlite3.Connection, message_id: int,
                  media: tuple[StoredMedia, ...]) -> None:
    db.executemany("INSERT INTO message_media(message_id, position, kind, sha256, ext)"
                   " VALUES (?, ?, ?, ?, ?)",
                   [(message_id, i, m.kind, m.sha256, m.ext) for i, m in enumerate(media)])


def migrate(db: sqlite3.Connection, version: int) -> None:
    """Bring a version-`version` file to SCHEMA_VERSION in one transaction: a kill in the
    middle leaves it as it was (SQLite's DDL and user_version are transactional)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for step in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[step]:
                db.execute(statement)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


class History:
    """The conversation store. Safe to use from several threads (one connection, a lock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.media_dir = path.parent / "media"  # the messages' images and audio
        self._lock = threading.Lock()
        # a damaged file is kept under another name (recovered_from), a new one started
        self._db, self.recovered_from = open_or_set_aside(path, self._open)
        self.interrupted_on_open = self._mark_interrupted()

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        db = connect(path)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise HistoryError(f"{path} was written by a newer Ember (schema {version}); "
                               "update Ember to open it")
        if version == 0:
            db.executescript(SCHEMA_V1)
            db.execute("PRAGMA user_version=1")
            version = 1
        if version < SCHEMA_VERSION:
            migrate(db, version)
        db.executescript(MCP_SERVERS_TABLE)
        db.executescript(STREAM_WRITERS_TABLE)
        return db

    def _mark_interrupted(self) -> int:
        """Mark "interrupted" the answers left "streaming" by a process that is gone (a crash,
        a kill); an answer another live Ember process is still writing stays as it is."""
        with self._lock:
            rows = self._db.execute(
                "SELECT m.id, w.pid, w.started FROM messages m LEFT JOIN stream_writers w"
                " ON w.message_id = m.id WHERE m.status='streaming'").fetchall()
            cut = [row["id"] for row in rows
                   if row["pid"] is None or not writer_alive(row["pid"], row["started"])]
            self._db.executemany(
                "UPDATE messages SET status='interrupted' WHERE id=? AND status='streaming'",
                [(i,) for i in cut])
            self._db.execute("DELETE FROM stream_writers WHERE message_id NOT IN"
                             " (SELECT id FROM messages WHERE status='streaming')")
            return len(cut)

    def _rollback(self) -> None:
        """Undo the open transaction, if SQLite has not already (a failed COMMIT on a full
        disk rolls back by itself)."""
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # conversations

    def create(self, model: str | None = None, title: str = "New chat",
               system_prompt: str = "") -> Conversation:
        now = time.time()
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO conversations(title, model, system_prompt, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?)", (title, model, system_prompt, now, now))
            conv_id = _rowid(cur)
        return self.get(conv_id)

    def get(self, conversation_id: int) -> Conversation:
        with self._lock:
            row = self._db.execute("SELECT * FROM conversations WHERE id=?",
                                   (conversation_id,)).fetchone()
        if row is None:
            raise HistoryError(f"no conversation {conversation_id}")
        return _conversation(row)

    def conversations(self, search: str = "") -> list[Conversation]:
        """Not deleted, most recently updated first; `search` matches titles and messages."""
        sql = "SELECT * FROM conversations WHERE deleted_at IS NULL"
        args: tuple = ()
        if search.strip():
            like = "%" + search.strip().replace("\\", "\\\\").replace("%", "\\%") \
                .replace("_", "\\_") + "%"
            sql += (" AND (title LIKE ? ESCAPE '\\' OR id IN (SELECT conversation_id FROM "
                    "messages WHERE content LIKE ? ESCAPE '\\'))")
            args = (like, like)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY updated_at DESC, id DESC", args).fetchall()
        return [_conversation(r) for r in rows]

    def _update_conversation(self, conversation_id: int, **fields: object) -> None:
        sets = ", ".join(f"{k}=?" for k in fields)
        with self._lock:
            cur = self._db.execute(f"UPDATE conversations SET {sets} WHERE id=?",
                                   (*fields.values(), conversation_id))
        if cur.rowcount == 0:
            raise HistoryError(f"no conversation {conversation_id}")

    def rename(self, conversation_id: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise HistoryError("a conversation's title cannot be empty")
        self._update_conversation(conversation_id, title=title[:200])

    def set_model(self, conversation_id: int, model: str | None) -> None:
        self._update_conversation(conversation_id, model=model)

    def set_system_prompt(self, conversation_id: int, system_prompt: str) -> None:
        self._update_conversation(conversation_id, system_prompt=system_prompt)

    def set_thinking(self, conversation_id: int, thinking: str | None) -> None:
        """The conversation's Think setting (THINKING_SETTINGS; None: the model's default)."""
        if thinking is not None and thinking not in THINKING_SETTINGS:
            raise HistoryError(f"unknown thinking setting {thinking!r} (use "
                               f"{', '.join(THINKING_SETTINGS)})")
        self._update_conversation(conversation_id, thinking=thinking)

    def mcp_servers(self, conversation_id: int) -> tuple[str, ...]:
        """The MCP servers (names in mcp.json) switched on in the conversation."""
        with self._lock:
            rows = self._db.execute("SELECT server FROM conversation_mcp_servers WHERE "
                                    "conversation_id=? ORDER BY server",
                                    (conversation_id,)).fetchall()
        return tuple(r[0] for r in rows)

    def set_mcp_servers(self, conversation_id: int, servers: tuple[str, ...]) -> None:
        self.get(conversation_id)  # an unknown conversation is an error, not a silent no-op
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM conversation_mcp_servers WHERE conversation_id=?",
                                 (conversation_id,))
                self._db.executemany("INSERT INTO conversation_mcp_servers VALUES (?, ?)",
                                     [(conversation_id, s) for s in sorted(set(servers))])
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    def delete(self, conversation_id: int) -> None:
        """Mark deleted (undo with `restore`)."""
        self._update_conversation(conversation_id, deleted_at=time.time())

    def restore(self, conversation_id: int) -> None:
        self._update_conversation(conversation_id, deleted_at=None)

    def purge_deleted(self, older_than_s: float = 0.0) -> int:
        """Remove the conversations deleted `older_than_s` ago, and the media files no
        message holds any more (a file another conversation holds stays)."""
        with self._lock:
            cur = self._db.execute("DELETE FROM conversations WHERE deleted_at IS NOT NULL "
                                   "AND deleted_at <= ?", (time.time() - older_than_s,))
            purged = cur.rowcount
            held = {r[0] for r in self._db.execute("SELECT DISTINCT sha256 FROM message_media")}
        if purged:
            self._remove_unused_media(held)
        return purged

    def _remove_unused_media(self, held: set[str]) -> None:
        if not self.media_dir.is_dir():
            return
        recent = time.time() - UNUSED_MEDIA_GRACE_S
        for path in self.media_dir.iterdir():
            match = MEDIA_NAME.match(path.name)
            if match is None or match["sha"] in held:
                continue
            try:
                if path.stat().st_mtime < recent:
                    path.unlink()
            except OSError:
                pass  # gone already, or not ours to remove: it is tried again next purge

    # media files

    def store_media(self, data: bytes, kind: str, ext: str) -> StoredMedia:
        """Keep `data` (an image's or clip's bytes as given) as media/<sha256>.<ext>: written
        to a temporary file and renamed, so a kill leaves the whole file or none; a file
        already there (the same bytes) is reused."""
        media = StoredMedia(kind, hashlib.sha256(data).hexdigest(), ext.lower())
        _check_media((media,))
        target = self.media_path(media)
        if target.is_file() and target.stat().st_size == len(data):
            os.utime(target)  # held again: a purge's grace starts over
            return media
        self.media_dir.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{media.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with tmp.open("wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return media

    def media_path(self, media: StoredMedia) -> Path:
        _check_media((media,))  # a crafted name never reads or writes elsewhere
        return self.media_dir / media.name

    def read_media(self, media: StoredMedia) -> bytes:
        """The file's bytes; a HistoryError names a file that is missing."""
        try:
            return self.media_path(media).read_bytes()
        except OSError as e:
            raise HistoryError(f"the {media.kind} {media.name} is missing from "
                               f"{self.media_dir} ({e.strerror or e})") from e

    def set_preset(self, conversation_id: int, preset: str | None) -> None:
        """The chat's preset, by name (app.presets); None: the app's own settings."""
        self._update_conversation(conversation_id, preset=preset)

    # messages

    def all_messages(self, conversation_id: int) -> list[StoredMessage]:
        """Every message of the conversation, every version of every turn, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM messages WHERE conversation_id=? ORDER BY id",
                                    (conversation_id,)).fetchall()
            held = self._db.execute(
                "SELECT mm.* FROM message_media mm JOIN messages m ON m.id=mm.message_id"
                " WHERE m.conversation_id=? ORDER BY mm.message_id, mm.position",
                (conversation_id,)).fetchall()
        media: dict[int, list[StoredMedia]] = {}
        for r in held:
            media.setdefault(r["message_id"], []).append(
                StoredMedia(r["kind"], r["sha256"], r["ext"]))
        return [_message(r, tuple(media.get(r["id"], ()))) for r in rows]

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        """The shown path, first turn to leaf: what the window shows and the model is given."""
        root = self.get(conversation_id).shown_root_id
        return shown_path(self.all_messages(conversation_id), root)

    def versions(self, conversation_id: int) -> dict[int, Version]:
        """Each message's place among its versions (siblings)."""
        return versions(self.all_messages(conversation_id))

    def _path_ids(self, conversation_id: int) -> list[int]:
        """The shown path's ids; called with the lock held, inside a transaction."""
        rows = self._db.execute("SELECT id, parent_id, shown_child_id FROM messages"
                                " WHERE conversation_id=?", (conversation_id,)).fetchall()
        root = self._db.execute("SELECT shown_root_id FROM conversations WHERE id=?",
                                (conversation_id,)).fetchone()
        nodes = [_Node(r[0], r[1], r[2]) for r in rows]
        return [n.id for n in shown_path(nodes, root[0] if root else None)]

    def _show(self, conversation_id: int, parent_id: int | None, message_id: int) -> None:
        """Make `message_id` the shown child of its parent; lock held, in a transaction."""
        if parent_id is None:
            self._db.execute("UPDATE conversations SET shown_root_id=? WHERE id=?",
                             (message_id, conversation_id))
        else:
            self._db.execute("UPDATE messages SET shown_child_id=? WHERE id=?",
                             (message_id, parent_id))

    def add_message(self, conversation_id: int, role: str, content: str,
                    status: str = "complete", stats: dict | None = None,
                    model: str | None = None, reasoning: str = "",
                    tool_calls: tuple[ToolCall, ...] = (), tool_call_id: str | None = None,
                    tool_name: str | None = None,
                    parent_id: int | None | Leaf = LEAF,
                    media: tuple[StoredMedia, ...] = ()) -> StoredMessage:
        """Add a message below `parent_id` (by default the shown path's last message; None:
        a new first turn) and show it, in one transaction. A message added below a parent that
        already has children is a new version beside them (edit, regenerate). `media`: files
        kept by store_media, held by the message in this order."""
        if status not in STATUSES:
            raise HistoryError(f"unknown message status {status!r}")
        _check_media(media)
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if isinstance(parent_id, Leaf):
                    path = self._path_ids(conversation_id)
                    parent = path[-1] if path else None
                else:
                    parent = parent_id
                    if parent is not None and self._db.execute(
                            "SELECT 1 FROM messages WHERE id=? AND conversation_id=?",
                            (parent, conversation_id)).fetchone() is None:
                        raise HistoryError(f"no message {parent} in conversation "
                                           f"{conversation_id}")
                cur = self._db.execute(
                    "INSERT INTO messages(conversation_id, role, content, status, stats, model,"
                    " created_at, reasoning, tool_calls, tool_call_id, tool_name, parent_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (conversation_id, role, content, status,
                     json.dumps(stats) if stats else None, model, now, reasoning,
                     _calls_json(tool_calls), tool_call_id, tool_name, parent))
                _insert_media(self._db, _rowid(cur), media)
                self._show(conversation_id, parent, _rowid(cur))
                if status == "streaming":
                    self._db.execute(
                        "INSERT INTO stream_writers(message_id, pid, started) VALUES (?, ?, ?)",
                        (cur.lastrowid, os.getpid(), _STARTED))
                self._db.execute("UPDATE conversations SET updated_at=? WHERE id=?",
                                 (now, conversation_id))
                self._db.execute("COMMIT")
            except sqlite3.IntegrityError as e:
                self._rollback()
                raise HistoryError(f"no conversation {conversation_id}") from e
            except BaseException:
                self._rollback()
                raise
            row = self._db.execute("SELECT * FROM messages WHERE id=?",
                                   (cur.lastrowid,)).fetchone()
        return _message(row, media)

    def import_trees(self, trees: list[tuple[Conversation, list[StoredMessage]]]) -> list[int]:
        """Add whole conversations (app.export), every message under a new id with its tree
        remapped, all in one transaction: nothing is added unless all of it is. Parents come
        before their children in each list; their media files are stored already
        (store_media). Returns the new conversation ids."""
        new_ids: list[int] = []
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for conv, messages in trees:
                    cur = self._db.execute(
                        "INSERT INTO conversations(title, model, system_prompt, created_at,"
                        " updated_at, thinking, preset) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (conv.title, conv.model, conv.system_prompt, conv.created_at,
                         conv.updated_at, conv.thinking, conv.preset))
                    conv_id = _rowid(cur)
                    ids: dict[int, int] = {}
                    for m in messages:
                        cur = self._db.execute(
                            "INSERT INTO messages(conversation_id, role, content, status,"
                            " stats, model, created_at, reasoning, tool_calls, tool_call_id,"
                            " tool_name, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (conv_id, m.role, m.content, m.status,
                             json.dumps(m.stats) if m.stats is not None else None, m.model,
                             m.created_at, m.reasoning, _calls_json(m.tool_calls),
                             m.tool_call_id, m.tool_name,
                             None if m.parent_id is None else ids[m.parent_id]))
                        ids[m.id] = _rowid(cur)
                        _check_media(m.media)
                        _insert_media(self._db, ids[m.id], m.media)
                    for m in messages:
                        if m.shown_child_id is not None:
                            self._db.execute("UPDATE messages SET shown_child_id=? WHERE id=?",
                                             (ids[m.shown_child_id], ids[m.id]))
                    if conv.shown_root_id is not None:
                        self._db.execute("UPDATE conversations SET shown_root_id=? WHERE id=?",
                                         (ids[conv.shown_root_id], conv_id))
                    new_ids.append(conv_id)
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        return new_ids

    def switch_to(self, message_id: int) -> None:
        """Show this version of its turn, and below it the path it had when last shown."""
        with self._lock:
            row = self._db.execute("SELECT conversation_id, parent_id FROM messages WHERE id=?",
                                   (message_id,)).fetchone()
            if row is None:
                raise HistoryError(f"no message {message_id}")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._show(row[0], row[1], message_id)
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    def update_message(self, message_id: int, content: str, status: str | None = None,
                       stats: dict | None = None, reasoning: str | None = None,
                       tool_calls: tuple[ToolCall, ...] | None = None) -> None:
        """Save a streamed answer as it grows; None leaves a field as it is."""
        if status is not None and status not in STATUSES:
            raise HistoryError(f"unknown message status {status!r}")
        with self._lock:
            self._db.execute(
                "UPDATE messages SET content=?, status=COALESCE(?, status),"
                " stats=COALESCE(?, stats), reasoning=COALESCE(?, reasoning),"
                " tool_calls=CASE WHEN ? THEN ? ELSE tool_calls END WHERE id=?",
                (content, status, json.dumps(stats) if stats else None, reasoning,
                 tool_calls is not None, _calls_json(tool_calls or ()), message_id))
