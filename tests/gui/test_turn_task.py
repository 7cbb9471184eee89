"""The window's chat turn thread (app/gui/turn_task.py) around a real ChatSession: events
reach the UI thread in order, an approval blocks the turn until the window decides, Stop
wakes a waiting approval, and a turn stopped is drained at once once its thread ended. The
turns of a real model through it are tests/gui/test_mcp_tools.py's and test_window.py's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.chat.events import ChatError, ChatEvent, Notice, ToolCallAsked
from app.chat.request import TurnOptions
from app.chat.session import ChatSession, OnEvent
from app.chat.tools import Approve
from app.gui.turn_task import TurnTask, Work
from app.history import History
from app.runtime import Runtime
from app.store import Store
from backends.base import SamplingParams

ASKED = ToolCallAsked(7, "get_weather", "weather", '{"city": "Oslo"}')


@pytest.fixture
def session(tmp_path: Path, store: Store) -> Iterator[ChatSession]:
    history = History(tmp_path / "history.db")
    conv = history.create(model="any")
    with Runtime(store=store) as runtime:  # nothing loads: the work below asks no model
        yield ChatSession(history, runtime, conv.id, "any", TurnOptions(SamplingParams()))


def run(qtbot, session: ChatSession, work: Work,
        on_asked=None) -> tuple[TurnTask, list[ChatEvent], list[bool]]:
    task = TurnTask(session, work)
    seen: list[ChatEvent] = []
    ended: list[bool] = []

    def shown(event: ChatEvent) -> None:
        assert threading.current_thread() is threading.main_thread()
        seen.append(event)
        if isinstance(event, ToolCallAsked) and on_asked is not None:
            on_asked(task)

    task.happened.connect(shown)
    task.ended.connect(lambda: ended.append(True))
    task.start()
    return task, seen, ended


def test_an_approval_waits_for_the_window_and_events_come_in_order(qtbot, session):
    def work(s: ChatSession, show: OnEvent, approve: Approve) -> None:
        show(Notice("before"))
        show(Notice(approve(ASKED)))

    task, seen, ended = run(qtbot, session, work, lambda t: t.decide(7, "always"))
    qtbot.waitUntil(lambda: ended == [True], timeout=10_000)
    assert seen == [Notice("before"), ASKED, Notice("always")]
    assert task.wait(5)


def test_stop_wakes_a_waiting_approval_and_the_stopped_turn_is_drained_at_once(
        qtbot, session):
    def work(s: ChatSession, show: OnEvent, approve: Approve) -> None:
        decision = approve(ASKED)
        show(Notice(f"{decision}, stopped: {s.stopped}"))

    task, seen, ended = run(qtbot, session, work)
    qtbot.waitUntil(lambda: seen == [ASKED], timeout=10_000)
    task.stop()
    assert task.wait(5)  # no decision came: Stop alone ended the wait
    task.drain()  # without the event loop
    assert seen == [ASKED, Notice("deny, stopped: True")] and ended == [True]


def test_a_bug_in_the_turn_is_an_error_and_still_ends_it(qtbot, session):
    def work(s: ChatSession, show: OnEvent, approve: Approve) -> None:
        raise RuntimeError("boom")

    _task, seen, ended = run(qtbot, session, work)
    qtbot.waitUntil(lambda: ended == [True], timeout=10_000)
    assert seen == [ChatError("RuntimeError: boom", "backend")]
