"""The conversation store: durable, recoverable, undoable."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from app.history import MIGRATIONS, SCHEMA_VERSION, History, HistoryError
from backends.base import ToolCall
from tests.support.dead_writer import as_if_its_writer_died


@pytest.fixture
def history(tmp_path: Path) -> History:
    return History(tmp_path / "history.db")


def test_messages_come_back_in_order_after_reopening(tmp_path: Path):
    h = History(tmp_path / "h.db")
    conv = h.create(model="m:Q4", system_prompt="be brief")
    h.add_message(conv.id, "user", "hi")
    h.add_message(conv.id, "assistant", "hello", stats={"completion_tokens": 2})
    h.close()
    again = History(tmp_path / "h.db")
    msgs = again.messages(conv.id)
    assert [(m.role, m.content) for m in msgs] == [("user", "hi"), ("assistant", "hello")]
    assert msgs[1].stats == {"completion_tokens": 2}
    assert again.get(conv.id).system_prompt == "be brief"


def test_an_answer_still_streaming_when_the_app_died_is_kept_as_interrupted(tmp_path: Path):
    h = History(tmp_path / "h.db")
    conv = h.create()
    h.add_message(conv.id, "user", "write a poem")
    answer = h.add_message(conv.id, "assistant", "", status="streaming")
    h.update_message(answer.id, "Roses are")
    as_if_its_writer_died(tmp_path / "h.db")  # no close(): the process is gone
    again = History(tmp_path / "h.db")
    assert again.interrupted_on_open == 1
    last = again.messages(conv.id)[-1]
    assert (last.content, last.status) == ("Roses are", "interrupted")


def test_delete_is_undone_by_restore_and_purged_later(history: History):
    a, b = history.create(title="alpha"), history.create(title="beta")
    history.delete(a.id)
    assert [c.title for c in history.conversations()] == ["beta"]
    history.restore(a.id)
    assert {c.title for c in history.conversations()} == {"alpha", "beta"}
    history.delete(b.id)
    assert history.purge_deleted() == 1
    with pytest.raises(HistoryError):
        history.get(b.id)


def test_search_matches_titles_and_message_text_literally(history: History):
    a = history.create(title="Rust lifetimes")
    b = history.create(title="Dinner")
    history.add_message(b.id, "user", "how long to boil 100% of the pasta?")
    history.create(title="Other")
    assert [c.id for c in history.conversations("rust")] == [a.id]
    assert [c.id for c in history.conversations("100%")] == [b.id]
    assert history.conversations("_") == []


def test_rename_rejects_an_empty_title_and_unknown_conversations(history: History):
    conv = history.create()
    with pytest.raises(HistoryError, match="empty"):
        history.rename(conv.id, "   ")
    with pytest.raises(HistoryError, match="no conversation 999"):
        history.rename(999, "x")
    with pytest.raises(HistoryError, match="no conversation 999"):
        history.add_message(999, "user", "x")


def test_a_damaged_file_is_kept_aside_and_a_new_history_started(tmp_path: Path):
    path = tmp_path / "history.db"
    path.write_bytes(b"this is not sqlite" * 100)
    h = History(path)
    assert h.recovered_from is not None and h.recovered_from.read_bytes().startswith(b"this")
    conv = h.create()
    assert h.get(conv.id).title == "New chat"


# -- the schema-2 migration: thinking and tool calls in their own columns -----------------
# history-v1.db was written by app/history.py as it was at commit 10eb161 (schema 1, before
# tool calls and thinking) by tests/unit/data/make_history_v1.py; one of its answers was still
# "streaming" when that app stopped.
V1_FILE = Path(__file__).parent / "data" / "history-v1.db"


def raw_rows(path: Path, table: str) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()


def columns(path: Path, table: str) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


@pytest.fixture
def v1_copy(tmp_path: Path) -> Path:
    path = tmp_path / "history.db"
    shutil.copyfile(V1_FILE, path)
    return path


def test_a_schema_1_history_opens_keeping_every_message_byte_for_byte(v1_copy: Path):
    assert sqlite3.connect(v1_copy).execute("PRAGMA user_version").fetchone()[0] == 1
    assert "reasoning" not in columns(v1_copy, "messages")
    before = raw_rows(v1_copy, "messages")
    conversations_before = raw_rows(v1_copy, "conversations")
    assert len(before) == 8 and any("🔥" in r[3] for r in before)

    h = History(v1_copy)
    assert h.interrupted_on_open == 1  # the answer cut off when the old app stopped
    h.close()
    with contextlib.closing(sqlite3.connect(v1_copy)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert columns(v1_copy, "messages")[:8] == ["id", "conversation_id", "role", "content",
                                                "status", "stats", "model", "created_at"]
    assert columns(v1_copy, "messages")[8:12] == ["reasoning", "tool_calls", "tool_call_id",
                                                  "tool_name"]
    assert columns(v1_copy, "conversations")[7] == "thinking"
    after = raw_rows(v1_copy, "messages")
    for old, new in zip(before, after, strict=True):
        # every old column as it was, except the one status the reopening changes on purpose
        expected = old[:4] + (("interrupted",) if old[4] == "streaming" else old[4:5]) + old[5:]
        assert new[:8] == expected
        assert new[8:12] == ("", None, None, None)
    assert [r + (None,) for r in conversations_before] == [
        r[:8] for r in raw_rows(v1_copy, "conversations")]


def test_a_migrated_history_reads_old_messages_and_stores_thinking_and_tool_calls(
        v1_copy: Path):
    h = History(v1_copy)
    convs = sorted(h.conversations(), key=lambda c: c.id)
    assert [c.title for c in convs] == ["Reverse a string (renamed)", "Cut off by a crash"]
    first = h.messages(convs[0].id)
    assert first[1].content == "```python\ndef rev(s: str) -> str:\n    return s[::-1]\n```\n"
    assert first[1].stats["completion_tokens"] == 22
    assert first[2].content.startswith("Unicode: 日本語 — émojis 🔥🧠, tabs\tand\r\nCRLF")
    assert (first[1].reasoning, first[1].tool_calls) == ("", ())
    crashed = h.messages(convs[1].id)[-1]
    assert (crashed.content, crashed.status) == ("Roses are red,\nviolets", "interrupted")
    assert convs[0].thinking is None
    # the new columns work on the migrated file
    call = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
    answer = h.add_message(convs[0].id, "assistant", "", status="streaming",
                           reasoning="The user wants")
    h.update_message(answer.id, "", reasoning="The user wants the weather.")
    h.update_message(answer.id, "", "complete", tool_calls=(call,))
    h.add_message(convs[0].id, "tool", "18°C", tool_call_id="call_1", tool_name="get_weather")
    h.set_thinking(convs[0].id, "low")
    h.close()
    again = History(v1_copy)
    stored = again.messages(convs[0].id)
    assert (stored[-2].reasoning, stored[-2].tool_calls, stored[-2].status) == (
        "The user wants the weather.", (call,), "complete")
    assert (stored[-1].role, stored[-1].tool_call_id, stored[-1].tool_name) == (
        "tool", "call_1", "get_weather")
    assert again.get(convs[0].id).thinking == "low"
    with pytest.raises(HistoryError, match="unknown thinking setting 'max'"):
        again.set_thinking(convs[0].id, "max")


def test_a_crash_while_thinking_keeps_the_thinking_marked_interrupted(tmp_path: Path):
    h = History(tmp_path / "h.db")
    conv = h.create()
    h.add_message(conv.id, "user", "think hard")
    answer = h.add_message(conv.id, "assistant", "", status="streaming")
    h.update_message(answer.id, "", reasoning="Let me consider")
    as_if_its_writer_died(tmp_path / "h.db")  # no close(): the process is gone
    again = History(tmp_path / "h.db")
    last = again.messages(conv.id)[-1]
    assert (last.reasoning, last.content, last.status) == ("Let me consider", "",
                                                           "interrupted")


def test_a_new_history_is_created_at_the_current_schema(tmp_path: Path):
    History(tmp_path / "new.db").close()
    assert columns(tmp_path / "new.db", "messages")[8:] == [
        "reasoning", "tool_calls", "tool_call_id", "tool_name", "parent_id", "shown_child_id"]
    with contextlib.closing(sqlite3.connect(tmp_path / "new.db")) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_failed_migration_leaves_the_file_at_its_old_version(v1_copy: Path, monkeypatch):
    monkeypatch.setitem(MIGRATIONS, 1, MIGRATIONS[1] + ("ALTER TABLE nowhere ADD COLUMN x",))
    with pytest.raises(sqlite3.OperationalError):
        History(v1_copy)
    with contextlib.closing(sqlite3.connect(v1_copy)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "reasoning" not in columns(v1_copy, "messages")
