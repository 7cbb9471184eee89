"""The very first start: what the window waits for, shown instead of an empty screen.

On a machine Ember has not seen, hardware detection measures the memory bandwidth (about a
second on two cores; app.hardware keeps the result in hardware.json), and the first page,
"Your machine", needs it for its predictions. A double-click should not wait on nothing:
a splash with the icon and what is going on shows at once, the detection runs on a thread,
and the window is built with its result. Later starts skip all of this.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QEventLoop, QObject, Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QSplashScreen

from app.hardware import HardwareProfile, bandwidth_known, detect
from app.identity import ICON_SVG

MESSAGE = "Ember is checking what this machine can do…"


class _Detected(QObject):
    done = Signal()


def hardware_behind_splash(app: QApplication) -> HardwareProfile | None:
    """The detected hardware, measured behind a splash; None when it is known already (the
    window then detects it itself in milliseconds)."""
    if bandwidth_known():
        return None
    splash = QSplashScreen(QIcon(str(ICON_SVG)).pixmap(160, 160))
    splash.setWindowTitle("Ember: first start")  # the window title is plain "Ember"
    splash.showMessage(MESSAGE, Qt.AlignmentFlag.AlignBottom | Qt.AlignmentFlag.AlignHCenter)
    splash.show()
    app.processEvents()
    result: dict[str, object] = {}
    detected = _Detected()
    loop = QEventLoop()
    detected.done.connect(loop.quit)  # queued: emitted from the worker thread

    def work() -> None:
        try:
            result["hardware"] = detect()
        except BaseException as e:  # re-raised on the UI thread: start-up failure handling
            result["error"] = e
        finally:
            detected.done.emit()

    threading.Thread(target=work, daemon=True, name="ember-gui-detect").start()
    loop.exec()
    splash.close()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["hardware"]  # type: ignore[return-value]
