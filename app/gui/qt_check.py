"""Refuse to start on a Qt binding that would crash the window mid-work.

PySide6 6.12.0's `SignalInstance.emit` hands back `True` without the reference it owes its
caller: every emit, from any thread, with or without receivers, lowers `True`'s reference
count by one (measured: 10 emits, -10; 6.11.3 and 6.10.3: 0). Python 3.11 keeps real
reference counts on `True`, so after a few thousand emits it reaches zero and the process
aborts with "Fatal Python error: bool_dealloc" wherever the last emit happens: a download's
progress (one emit per chunk) killed the window on the first run (issue 35). Python 3.12
and newer make `True` immortal, so there the bug leaks nothing.

pyproject.toml keeps 6.12.0 out; this check catches the same bug in whatever PySide6 a
venv or a bundle ended up with, at start, as a message and a crash report instead of an
abort minutes later. No upstream report could be read from this network (bugreports.qt.io
is unreachable here); the reproduction is `tests/unit/test_qt_binding.py`.
"""

from __future__ import annotations

import ctypes
import sys

from backends.errors import EmberError

PROBE_EMITS = 16  # far below any live reference count of True, so the probe itself is safe
WORKING_PYSIDE6 = "6.11.3"  # the newest release checked to pass (tests/unit/test_qt_binding.py)


class BrokenQtBindingError(EmberError):
    pass


def emit_reference_drift() -> int:
    """How many references to `True` and `False` `PROBE_EMITS` signal emits took (0 on a
    sound binding, and on any Python where the two are immortal)."""
    from PySide6.QtCore import QObject, Signal

    class Probe(QObject):
        fired = Signal(int)

    probe = Probe()
    before = sys.getrefcount(True), sys.getrefcount(False)
    for i in range(PROBE_EMITS):
        probe.fired.emit(i)
    lost_true, lost_false = before[0] - sys.getrefcount(True), before[1] - sys.getrefcount(False)
    repay(lost_true, lost_false)
    return lost_true + lost_false


def repay(lost_true: int, lost_false: int) -> None:
    """Give back the references a broken binding took, so that probing it costs nothing."""
    for value, lost in ((True, lost_true), (False, lost_false)):
        for _ in range(max(lost, 0)):
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(value))


def check_qt_binding() -> None:
    """Raise BrokenQtBindingError, naming the version and the way out, on a binding whose
    signals leak references."""
    drift = emit_reference_drift()
    if drift <= 0:
        return
    import PySide6

    raise BrokenQtBindingError(
        f"PySide6 {PySide6.__version__} has a reference-count bug in Signal.emit ({drift} "
        f"references to True lost in {PROBE_EMITS} emits) that aborts Ember within seconds "
        f"of a download or an answer. Install a release without it, e.g. "
        f"pip install 'PySide6-Essentials=={WORKING_PYSIDE6}' in Ember's environment "
        f"(bash packaging/setup.sh does so).")
