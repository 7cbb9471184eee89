"""Branches: edit and regenerate keep every version; the shown path is what the model sees."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from app.history import History, HistoryError
from app.history_tree import descendants
from backends.base import ToolCall
from tests.support.dead_writer import as_if_its_writer_died

# history-v2.db was written by app/history.py as it was at commit 6f19f5e (schema 2, before
# message trees) by tests/unit/data/make_history_v2.py: thinking, a tool call and its result,
# a stopped answer, one still "streaming" when that app stopped, an empty and a deleted chat.
V2_FILE = Path(__file__).parent / "data" / "history-v2.db"


@pytest.fixture
def history(tmp_path: Path) -> History:
    return History(tmp_path / "history.db")


def contents(h: History, conv_id: int) -> list[str]:
    return [m.content for m in h.messages(conv_id)]


def raw(path: Path, sql: str) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchall()


def test_a_schema_2_history_becomes_one_linear_path_per_conversation(tmp_path: Path):
    path = tmp_path / "history.db"
    shutil.copyfile(V2_FILE, path)
    assert raw(path, "PRAGMA user_version") == [(2,)]
    old_cols = "id, conversation_id, role, content, status, stats, model, created_at, " \
               "reasoning, tool_calls, tool_call_id, tool_name"
    before = raw(path, f"SELECT {old_cols} FROM messages ORDER BY id")
    convs_before = raw(path, "SELECT * FROM conversations ORDER BY id")
    assert len(before) == 9

    h = History(path)
    assert h.interrupted_on_open == 1
    after = raw(path, f"SELECT {old_cols} FROM messages ORDER BY id")
    for old, new in zip(before, after, strict=True):  # every old column as it was
        assert new == old[:4] + (("interrupted",) if old[4] == "streaming" else old[4:5]) \
            + old[5:]
    assert [r[:8] for r in raw(path, "SELECT * FROM conversations ORDER BY id")] == \
        convs_before
    convs = {c.title: c for c in h.conversations()}
    assert set(convs) == {"Weather in Paris", "Cut off by a crash", "Empty"}
    weather = h.messages(convs["Weather in Paris"].id)
    assert [m.role for m in weather] == ["user", "assistant", "tool", "assistant", "user",
                                         "assistant"]
    assert weather[0].parent_id is None
    assert [m.parent_id for m in weather[1:]] == [m.id for m in weather[:-1]]
    assert [m.shown_child_id for m in weather[:-1]] == [m.id for m in weather[1:]]
    assert weather[1].tool_calls == (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)
    assert weather[1].reasoning == "The user wants the weather."
    assert (weather[2].tool_call_id, weather[2].content) == ("call_1", "18°C")
    assert weather[0].content == "What is the weather in Paris? 🔥 日本語"
    assert convs["Weather in Paris"].thinking == "low"
    assert all(v.count == 1 for v in h.versions(convs["Weather in Paris"].id).values())
    crashed = h.messages(convs["Cut off by a crash"].id)
    assert [(m.content, m.status) for m in crashed] == [
        ("write a poem", "complete"), ("Roses are red,\nviolets", "interrupted")]
    assert h.messages(convs["Empty"].id) == []
    # the deleted conversation is migrated too, and comes back whole on restore
    deleted = raw(path, "SELECT id FROM conversations WHERE deleted_at IS NOT NULL")[0][0]
    h.restore(deleted)
    assert [len(m.content) for m in h.messages(deleted)] == [5000]
    # and the migrated conversation grows as a tree
    h.add_message(convs["Weather in Paris"].id, "assistant", "Sunny.",
                  parent_id=weather[4].id)
    assert contents(h, convs["Weather in Paris"].id)[-2:] == ["And tomorrow?", "Sunny."]


def test_regenerate_adds_a_sibling_and_keeps_the_old_answer(history: History):
    conv = history.create()
    q = history.add_message(conv.id, "user", "q1")
    a1 = history.add_message(conv.id, "assistant", "a1")
    a2 = history.add_message(conv.id, "assistant", "a2", parent_id=q.id)
    assert contents(history, conv.id) == ["q1", "a2"]
    v = history.versions(conv.id)
    assert (v[a1.id].index, v[a2.id].index, v[a2.id].count) == (0, 1, 2)
    assert v[q.id].count == 1
    history.switch_to(a1.id)
    assert contents(history, conv.id) == ["q1", "a1"]


def test_editing_a_first_message_makes_a_new_root_and_switching_keeps_each_path_below(
        history: History):
    conv = history.create()
    history.add_message(conv.id, "user", "q1")
    history.add_message(conv.id, "assistant", "a1")
    history.add_message(conv.id, "user", "q2")
    history.add_message(conv.id, "assistant", "a2")
    edited = history.add_message(conv.id, "user", "q1 edited", parent_id=None)
    assert contents(history, conv.id) == ["q1 edited"]
    history.add_message(conv.id, "assistant", "b1")
    assert contents(history, conv.id) == ["q1 edited", "b1"]
    first = history.versions(conv.id)[edited.id].siblings[0]
    history.switch_to(first)  # the old version comes back with the whole path below it
    assert contents(history, conv.id) == ["q1", "a1", "q2", "a2"]
    history.switch_to(edited.id)
    assert contents(history, conv.id) == ["q1 edited", "b1"]
    assert len(history.all_messages(conv.id)) == 6


def test_switching_a_middle_turn_shows_the_path_that_version_had_below_it(history: History):
    conv = history.create()
    q1 = history.add_message(conv.id, "user", "q1")
    a1 = history.add_message(conv.id, "assistant", "a1")
    history.add_message(conv.id, "user", "q2")
    history.add_message(conv.id, "assistant", "a2")
    b1 = history.add_message(conv.id, "assistant", "b1", parent_id=q1.id)
    history.add_message(conv.id, "user", "q2 under b1")
    history.switch_to(a1.id)
    assert contents(history, conv.id) == ["q1", "a1", "q2", "a2"]
    history.switch_to(b1.id)
    assert contents(history, conv.id) == ["q1", "b1", "q2 under b1"]
    # a new message goes below the shown leaf
    history.add_message(conv.id, "assistant", "a3")
    assert contents(history, conv.id)[-1] == "a3"
    assert {m.content for m in history.all_messages(conv.id)
            if m.id in descendants(history.all_messages(conv.id), b1.id)} == {
        "q2 under b1", "a3"}


def test_a_path_survives_reopening_and_an_interrupted_branch_is_kept(tmp_path: Path):
    h = History(tmp_path / "h.db")
    conv = h.create()
    q = h.add_message(conv.id, "user", "write a poem")
    h.add_message(conv.id, "assistant", "Roses", status="complete")
    regen = h.add_message(conv.id, "assistant", "", status="streaming", parent_id=q.id)
    h.update_message(regen.id, "Violets are")
    as_if_its_writer_died(tmp_path / "h.db")  # no close(): the process is gone
    again = History(tmp_path / "h.db")
    shown = again.messages(conv.id)
    assert [(m.content, m.status) for m in shown] == [("write a poem", "complete"),
                                                      ("Violets are", "interrupted")]
    assert again.versions(conv.id)[regen.id].count == 2


def test_a_parent_from_another_conversation_or_unknown_is_refused(history: History):
    a, b = history.create(), history.create()
    qa = history.add_message(a.id, "user", "in a")
    with pytest.raises(HistoryError, match=f"no message {qa.id} in conversation {b.id}"):
        history.add_message(b.id, "user", "x", parent_id=qa.id)
    with pytest.raises(HistoryError, match="no message 999"):
        history.switch_to(999)
    assert history.messages(b.id) == [] and contents(history, a.id) == ["in a"]


def test_a_shown_choice_that_names_no_child_falls_back_to_the_newest(tmp_path: Path):
    h = History(tmp_path / "h.db")
    conv = h.create()
    q = h.add_message(conv.id, "user", "q")
    h.add_message(conv.id, "assistant", "old")
    h.add_message(conv.id, "assistant", "new", parent_id=q.id)
    h.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "h.db")) as db:
        db.execute("UPDATE messages SET shown_child_id=4242 WHERE id=?", (q.id,))
        db.commit()
    assert contents(History(tmp_path / "h.db"), conv.id) == ["q", "new"]
