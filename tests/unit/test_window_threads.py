"""The checks on the window's threads (app/gui/thread_guard.py, app/gui/thread_task.py): a
worker thread's call into a widget is caught with its stack, a signal emitted from a worker
is not, a task made off the UI thread is refused, and an exception that ends a thread or
escapes a slot leaves a crash report."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QObject, Signal
from PySide6.QtWidgets import QLabel

from app.config import Paths
from app.gui.thread_guard import WindowThreadGuard, report_thread_crashes
from app.gui.thread_task import ThreadTask


class Reporter(QObject):
    said = Signal(str)


def on_a_worker(work: Callable[[], None], name: str = "ember-test-worker") -> None:
    worker = threading.Thread(target=work, name=name)
    worker.start()
    worker.join()


@pytest.fixture
def guard() -> WindowThreadGuard:
    guard = WindowThreadGuard()
    guard.install()
    yield guard
    guard.uninstall()


def test_a_worker_thread_that_sets_a_label_is_caught_with_its_stack(qapp, guard) -> None:
    label = QLabel("before")

    def update_the_label() -> None:
        label.setText("from a worker")

    on_a_worker(update_the_label)
    [violation] = guard.violations
    assert "thread 'ember-test-worker' called QLabel.setText" in str(violation)
    assert "in update_the_label" in str(violation)  # where the call came from


def test_a_worker_thread_that_emits_a_signal_is_fine(qapp, guard) -> None:
    reporter = Reporter()
    heard: list[str] = []
    reporter.said.connect(heard.append)
    on_a_worker(lambda: reporter.said.emit("done"))
    QCoreApplication.processEvents()
    assert heard == ["done"] and guard.violations == []


class Listener:
    """Not a QObject: PySide6 wraps its method in a receiver of its own."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def heard(self, _text: str) -> None:
        self.threads.append(threading.current_thread().name)


def test_slots_of_every_kind_run_on_the_ui_thread_when_a_worker_emits(qapp, guard) -> None:
    """ThreadTask's premise: whatever is connected to a task's signal (a lambda, a plain
    object's method, a widget's method) runs on the UI thread, queued, not on the worker."""
    reporter, listener, label = Reporter(), Listener(), QLabel()
    ran_on: dict[str, str] = {}
    reporter.said.connect(lambda text: ran_on.setdefault("lambda",
                                                         threading.current_thread().name))
    reporter.said.connect(listener.heard)
    reporter.said.connect(label.setText)
    on_a_worker(lambda: reporter.said.emit("from the worker"))
    assert ran_on == {} and listener.threads == []  # nothing ran on the worker
    QCoreApplication.processEvents()
    assert ran_on == {"lambda": "MainThread"} and listener.threads == ["MainThread"]
    assert label.text() == "from the worker" and guard.violations == []


def test_the_ui_thread_may_call_widgets(qapp, guard) -> None:
    QLabel("x").setText("y")
    assert guard.violations == []


class Nothing(ThreadTask):
    def _run(self) -> None:
        pass


def test_a_task_made_off_the_ui_thread_is_refused(qapp) -> None:
    refused: list[str] = []

    def make() -> None:
        try:
            Nothing()
        except RuntimeError as e:
            refused.append(str(e))

    on_a_worker(make)
    assert refused == ["Nothing must be made on the UI thread"]


def reports(home: Paths) -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted(home.logs.glob("crash-*.log"))]


def test_a_thread_that_dies_leaves_a_crash_report(qapp, tmp_path: Path, monkeypatch) -> None:
    home = Paths(tmp_path / "home")
    passed_on: list[str] = []  # the hook before Ember's still hears of it (stderr, normally)
    monkeypatch.setattr(threading, "excepthook",
                        lambda args: passed_on.append(args.thread.name))
    undo = report_thread_crashes(home)
    try:
        def die() -> None:
            raise ValueError("the download's bookkeeping broke")
        on_a_worker(die, name="ember-gui-pull")
    finally:
        undo()
    assert passed_on == ["ember-gui-pull"]
    [report] = reports(home)
    assert "Ember failed during thread ember-gui-pull" in report
    assert "ValueError: the download's bookkeeping broke" in report and "in die" in report


@pytest.mark.qt_no_exception_capture
def test_an_exception_in_a_slot_leaves_a_crash_report_and_the_window_runs_on(
        qapp, tmp_path: Path, monkeypatch) -> None:
    home = Paths(tmp_path / "home")
    reporter = Reporter()

    def broken_slot(text: str) -> None:
        raise KeyError(text)

    reporter.said.connect(broken_slot)
    passed_on: list[str] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, value, tb: passed_on.append(repr(value)))
    undo = report_thread_crashes(home)
    try:
        reporter.said.emit("first")
        reporter.said.emit("second")
    finally:
        undo()
    assert passed_on == ["KeyError('first')", "KeyError('second')"]
    found = reports(home)  # two in the same second: neither overwrites the other
    assert len(found) == 2 and all("an exception in a Qt slot" in r for r in found)
    assert sorted(r.rsplit("\n", 2)[-2] for r in found) == ["KeyError: 'first'",
                                                            "KeyError: 'second'"]


class ClosedRemoteRuntime:
    """A Runtime whose remote client was closed under a request (an endpoint edited in
    Settings while the window asked the server about its model): httpx raises RuntimeError."""

    def thinking_support(self, model: str):
        raise RuntimeError("Cannot send a request, as the client has been closed.")

    def remote_models(self):
        raise RuntimeError("Cannot send a request, as the client has been closed.")


def test_the_think_control_task_answers_even_when_its_request_breaks(qtbot) -> None:
    from app.gui.tasks import ThinkingSupportTask
    from app.runtime.thinking import ThinkingSupport

    task = ThinkingSupportTask(ClosedRemoteRuntime(), "lab/agent")  # type: ignore[arg-type]
    with qtbot.waitSignal(task.found, timeout=5000) as found:
        task.start()
    assert found.args == ["lab/agent", ThinkingSupport()]  # no control, and no dead thread


def test_the_remote_list_task_answers_even_when_its_request_breaks(qtbot) -> None:
    from app.gui.tasks import RemoteModelsTask

    task = RemoteModelsTask(ClosedRemoteRuntime())  # type: ignore[arg-type]
    with qtbot.waitSignal(task.listed, timeout=5000) as listed:
        task.start()
    assert listed.args == [[], {"remote servers": "RuntimeError: Cannot send a request, as "
                                                  "the client has been closed."}]
