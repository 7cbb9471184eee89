"""The conversation store: durable, recoverable, undoable."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.history import History, HistoryError


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
    # no close(): the process is gone
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


def test_regenerate_drops_the_message_and_everything_after(history: History):
    conv = history.create()
    history.add_message(conv.id, "user", "q1")
    a1 = history.add_message(conv.id, "assistant", "a1")
    history.add_message(conv.id, "user", "q2")
    assert history.delete_messages_from(a1.id) == 2
    assert [m.content for m in history.messages(conv.id)] == ["q1"]


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
