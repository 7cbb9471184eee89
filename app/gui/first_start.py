"""The very first start: what the window waits for, shown instead of an empty screen.

On a machine Ember has not seen, hardware detection measures the memory bandwidth (about a
second on two cores; app.hardware keeps the result in hardware.json), and the first page,
"Your machine", needs it for its predictions. A double-click should not wait on nothing:
a splash with the icon and what is going on shows at once, the detection runs on a thread,
and the window is built with its result. Later starts skip all of this.
"""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import QEventLoop, Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QSplashScreen

from app.gui.thread_task import ThreadTask
from app.hardware import HardwareProfile, bandwidth_known, detect
from app.identity import ICON_SVG

log = logging.getLogger(__name__)

MESSAGE = "Ember is checking what this machine can do…"


class DetectTask(ThreadTask):
    """`app.hardware.detect()`; `hardware` or `error` is set before `done` is emitted."""
    thread_name = "ember-gui-detect"
    done = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.hardware: HardwareProfile | None = None
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.hardware = detect()
        except BaseException as e:  # re-raised on the UI thread: start-up failure handling
            self.error = e
        finally:
            self.done.emit()


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
    started = time.monotonic()
    task = DetectTask()
    loop = QEventLoop()
    task.done.connect(loop.quit)  # queued: emitted from the worker thread
    task.start()
    loop.exec()
    splash.close()
    log.info("first start: this machine detected in %.1f s behind the splash",
             time.monotonic() - started)
    if task.error is not None:
        raise task.error
    return task.hardware
