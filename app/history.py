"""Conversations in SQLite, written so that no kill can lose what was already said.

WAL journal, one transaction per change: a message is durable the moment `add_message`
returns. A streamed answer is stored as status "streaming" when it starts and its text is
saved as it grows; whatever is still "streaming" when the history is next opened was cut off
by a crash or a kill, and is marked "interrupted" (kept, never dropped).

Deleting a conversation only marks it deleted, so it can be undone; `purge_deleted` removes
those marked a while ago.

An assistant turn keeps its thinking (`reasoning`) and the tool calls it made apart from its
answer, and a tool result its call's id and tool name, so the model is given them back the way
its template expects (WIRE-FORMATS.md C.7). The schema's version is SQLite's user_version;
opening an older file migrates it in one transaction (MIGRATIONS), keeping every row.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from backends.base import ToolCall
from backends.errors import EmberError

SCHEMA_VERSION = 2
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
# MIGRATIONS[n] takes a version-n file to version n+1. Only ADD COLUMN: the rows stay as they
# are, byte for byte, and the new columns start empty.
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
}
# The MCP servers switched on in each conversation (app.mcp): a table of its own, created
# where missing, so it needs no schema version of its own and no other table changes.
MCP_SERVERS_TABLE = """
CREATE TABLE IF NOT EXISTS conversation_mcp_servers (
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    server TEXT NOT NULL,
    PRIMARY KEY (conversation_id, server)
);
"""
THINKING_SETTINGS = ("off", "on", "low", "medium", "high")
STATUSES = ("complete", "streaming", "interrupted", "stopped", "error")


class HistoryError(EmberError):
    pass


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


def _conversation(row: sqlite3.Row) -> Conversation:
    return Conversation(row["id"], row["title"], row["model"], row["system_prompt"],
                        row["created_at"], row["updated_at"], row["deleted_at"],
                        row["thinking"])


def _calls_json(calls: tuple[ToolCall, ...]) -> str | None:
    return json.dumps([{"id": c.id, "name": c.name, "arguments": c.arguments}
                       for c in calls]) if calls else None


def _message(row: sqlite3.Row) -> StoredMessage:
    stats = json.loads(row["stats"]) if row["stats"] else None
    calls = tuple(ToolCall(c["id"], c["name"], c["arguments"])
                  for c in json.loads(row["tool_calls"] or "[]"))
    return StoredMessage(row["id"], row["conversation_id"], row["role"], row["content"],
                         row["status"], stats, row["model"], row["created_at"],
                         row["reasoning"], calls, row["tool_call_id"], row["tool_name"])


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
        self.recovered_from: Path | None = None  # a damaged file moved aside at open
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = self._open(path)
        except sqlite3.DatabaseError:
            # Never overwrite the user's file: keep it under another name, start a new one.
            aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
            path.rename(aside)
            for extra in ("-wal", "-shm"):
                sidecar = path.with_name(path.name + extra)
                if sidecar.exists():
                    sidecar.rename(aside.with_name(aside.name + extra))
            self.recovered_from = aside
            self._db = self._open(path)
        self.interrupted_on_open = self._mark_interrupted()

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives any crash or kill of the process (only a power loss can
        # cost the last transactions), at a fraction of FULL's fsyncs per streamed update.
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
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
        return db

    def _mark_interrupted(self) -> int:
        with self._lock:
            cur = self._db.execute(
                "UPDATE messages SET status='interrupted' WHERE status='streaming'")
            return cur.rowcount

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
            conv_id = cur.lastrowid
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
                self._db.execute("ROLLBACK")
                raise

    def delete(self, conversation_id: int) -> None:
        """Mark deleted (undo with `restore`)."""
        self._update_conversation(conversation_id, deleted_at=time.time())

    def restore(self, conversation_id: int) -> None:
        self._update_conversation(conversation_id, deleted_at=None)

    def purge_deleted(self, older_than_s: float = 0.0) -> int:
        with self._lock:
            cur = self._db.execute("DELETE FROM conversations WHERE deleted_at IS NOT NULL "
                                   "AND deleted_at <= ?", (time.time() - older_than_s,))
            return cur.rowcount

    # messages

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM messages WHERE conversation_id=? ORDER BY id",
                                    (conversation_id,)).fetchall()
        return [_message(r) for r in rows]

    def add_message(self, conversation_id: int, role: str, content: str,
                    status: str = "complete", stats: dict | None = None,
                    model: str | None = None, reasoning: str = "",
                    tool_calls: tuple[ToolCall, ...] = (), tool_call_id: str | None = None,
                    tool_name: str | None = None) -> StoredMessage:
        if status not in STATUSES:
            raise HistoryError(f"unknown message status {status!r}")
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cur = self._db.execute(
                    "INSERT INTO messages(conversation_id, role, content, status, stats, model,"
                    " created_at, reasoning, tool_calls, tool_call_id, tool_name)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (conversation_id, role, content, status,
                     json.dumps(stats) if stats else None, model, now, reasoning,
                     _calls_json(tool_calls), tool_call_id, tool_name))
                self._db.execute("UPDATE conversations SET updated_at=? WHERE id=?",
                                 (now, conversation_id))
                self._db.execute("COMMIT")
            except sqlite3.IntegrityError as e:
                self._db.execute("ROLLBACK")
                raise HistoryError(f"no conversation {conversation_id}") from e
            row = self._db.execute("SELECT * FROM messages WHERE id=?",
                                   (cur.lastrowid,)).fetchone()
        return _message(row)

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

    def delete_messages_from(self, message_id: int) -> int:
        """Drop a message and every later one of its conversation (regenerate, edit)."""
        with self._lock:
            row = self._db.execute("SELECT conversation_id FROM messages WHERE id=?",
                                   (message_id,)).fetchone()
            if row is None:
                return 0
            cur = self._db.execute("DELETE FROM messages WHERE conversation_id=? AND id>=?",
                                   (row[0], message_id))
            return cur.rowcount
