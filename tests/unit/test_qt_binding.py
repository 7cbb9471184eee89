"""The Qt binding Ember runs on keeps Python's reference counts: PySide6 6.12.0's
`Signal.emit` lost a reference to `True` on every emit, and the window died with "Fatal Python
error: bool_dealloc" seconds into its first download (issue 35, app/gui/qt_check.py). These
tests fail on such a binding (run against 6.12.0: every case lost 8 references) and pass on
the one pyproject.toml installs."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from PySide6.QtCore import QObject, Signal

from app.gui.qt_check import BrokenQtBindingError, check_qt_binding, repay

EMITS = 8  # small: on a broken binding the test must fail, not abort the test process


class Source(QObject):
    with_object = Signal(object)
    with_values = Signal(int, str)
    with_flag = Signal(bool)
    bare = Signal()


ARGUMENTS = {"with_object": (object(),), "with_values": (1, "a"), "with_flag": (False,),
             "bare": ()}


def references() -> tuple[int, int]:
    return sys.getrefcount(True), sys.getrefcount(False)


def lost_by_emits(signal_name: str, connected: bool, from_thread: bool) -> tuple[int, int]:
    source = Source()
    signal = getattr(source, signal_name)
    if connected:
        signal.connect(lambda *args: None)
    args = ARGUMENTS[signal_name]

    lost: list[tuple[int, int]] = []

    def emit_all() -> None:  # counted around the emits alone, on the emitting thread
        before = references()
        for _ in range(EMITS):
            signal.emit(*args)
        after = references()
        lost.append((before[0] - after[0], before[1] - after[1]))
        repay(*lost[0])  # a broken binding fails this test instead of aborting the run

    def emit_all_once_the_ui_thread_waits() -> None:
        time.sleep(0.1)  # Thread.start's own bookkeeping on the UI thread takes and drops
        emit_all()  # references to True and False; by now that thread is blocked in join()

    if from_thread:
        worker = threading.Thread(target=emit_all_once_the_ui_thread_waits)
        worker.start()
        worker.join()
    else:
        emit_all()
    return lost[0]


@pytest.mark.parametrize("from_thread", [False, True], ids=["ui-thread", "worker-thread"])
@pytest.mark.parametrize("connected", [False, True], ids=["no-receiver", "receiver"])
@pytest.mark.parametrize("signal_name", list(ARGUMENTS))
def test_emitting_a_signal_keeps_the_references_to_true_and_false(
        qapp, signal_name: str, connected: bool, from_thread: bool) -> None:
    assert lost_by_emits(signal_name, connected, from_thread) == (0, 0)


def test_the_start_check_passes_on_the_installed_binding(qapp) -> None:
    check_qt_binding()  # raises BrokenQtBindingError on a binding that leaks


def test_the_start_check_names_the_binding_and_the_way_out(qapp, monkeypatch) -> None:
    import PySide6

    from app.gui import qt_check

    monkeypatch.setattr(qt_check, "emit_reference_drift", lambda: qt_check.PROBE_EMITS)
    with pytest.raises(BrokenQtBindingError) as failed:
        check_qt_binding()
    message = str(failed.value)
    assert f"PySide6 {PySide6.__version__} has a reference-count bug in Signal.emit" in message
    assert "pip install 'PySide6-Essentials==6.11.3'" in message
