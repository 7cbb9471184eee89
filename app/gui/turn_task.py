"""One chat turn of the window on a worker thread: app.chat's ChatSession does the work (the
question's documents, the tools, the answer, its tool rounds, what is saved when), and the
window only sees its events and answers its approvals.

The session calls `on_event` on the worker: each event goes into a queue, and `arrived`, a Qt
signal emitted there, is queued to the UI thread (app.gui.thread_task), where `drain` hands
the events to `happened` in order. A stopped turn whose thread has ended is drained at once
(`drain` straight after `wait`), so what Stop settled is on screen when Stop returns.

An approval blocks the worker until the window decides (`decide`, from the tool card) or the
turn is stopped (`stop` wakes it; the session then does not run the call).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from PySide6.QtCore import Signal

from app.chat.events import ChatError, ChatEvent, Decision, ToolCallAsked
from app.chat.session import ChatSession, OnEvent
from app.chat.tools import Approve
from app.gui.thread_task import ThreadTask

Work = Callable[[ChatSession, OnEvent, Approve], None]  # e.g. ChatSession.retry's call


class TurnTask(ThreadTask):
    thread_name = "ember-gui-turn"
    arrived = Signal()  # events are waiting in the queue (emitted on the worker)
    happened = Signal(object)  # each app.chat.events event, on the UI thread, in order
    ended = Signal()  # the turn is over and every event was given

    def __init__(self, session: ChatSession, work: Work) -> None:
        super().__init__()
        self.session, self.work = session, work
        self._events: queue.SimpleQueue[ChatEvent | None] = queue.SimpleQueue()
        self._decided = threading.Condition()
        self._decisions: dict[int, Decision] = {}
        self.over = False
        self.arrived.connect(self.drain)

    def _run(self) -> None:
        try:
            self.work(self.session, self._put, self._approve)
        except Exception as e:  # a bug must not leave the window busy forever
            self._events.put(ChatError(f"{type(e).__name__}: {e}", "backend"))
        finally:
            self._events.put(None)
            self.arrived.emit()

    def _put(self, event: ChatEvent) -> None:
        self._events.put(event)
        self.arrived.emit()

    def _approve(self, asked: ToolCallAsked) -> Decision:
        self._put(asked)
        with self._decided:
            self._decided.wait_for(lambda: asked.message_id in self._decisions
                                   or self.session.stopped)
            return self._decisions.pop(asked.message_id, "deny")

    def decide(self, message_id: int, decision: Decision) -> None:
        """The user's answer to the call stored as `message_id` (from the UI thread)."""
        with self._decided:
            self._decisions[message_id] = decision
            self._decided.notify_all()

    def stop(self) -> None:
        """End the turn (the session saves what it made "stopped"); a waiting call is woken."""
        self.session.stop()
        with self._decided:
            self._decided.notify_all()

    def drain(self) -> None:
        """Give the queued events (on the UI thread); `ended` after the last."""
        while not self.over:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if event is None:
                self.over = True
                self.ended.emit()
                return
            self.happened.emit(event)
