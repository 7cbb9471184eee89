"""Ember started in the tray on a real X server (`python -m tests.support.tray_probe MODEL`,
with DISPLAY and EMBER_HOME set and a tray host running): the window's own start path
(app.gui.start with in_tray, as `ember gui --tray` runs it), a model loaded, then the icon
right-clicked with xdotool where the tray put it, its menu read, the model unloaded from it,
and Quit. Prints one JSON line of what it saw; tests/gui/test_tray_xcb.py asserts on it.

In a process of its own: the test process runs Qt offscreen, and a process has one platform.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMenu, QSystemTrayIcon

from app.config import paths
from app.gui import identify, start

TIMEOUT_S = 60.0


def texts(menu: QMenu) -> list[str]:
    return [a.text() for a in menu.actions() if not a.isSeparator()]


def main(ref: str) -> int:
    app = QApplication([sys.argv[0]])
    identify(app)
    seen: dict = {"available": QSystemTrayIcon.isSystemTrayAvailable(),
                  "platform": app.platformName()}
    window = start(app, paths(), in_tray=True)
    tray = window.tray
    seen["tray"] = tray is not None
    seen["window_visible_at_start"] = window.isVisible()
    if tray is None:
        print(json.dumps(seen), flush=True)
        return 1
    window.runtime.load(ref, context=2048)
    steps: list[tuple[Callable[[], bool], Callable[[], None]]] = []
    started = time.monotonic()

    def when(ready: Callable[[], bool], then: Callable[[], None]) -> None:
        steps.append((ready, then))

    def tick() -> None:
        if time.monotonic() - started > TIMEOUT_S:
            seen["timed_out_at_step"] = len(seen.get("done", []))
            app.quit()
            return
        if steps and steps[0][0]():
            _, then = steps.pop(0)
            seen.setdefault("done", []).append(then.__name__)
            then()

    def embedded() -> bool:  # the tray host has taken the icon: it has a place on screen
        return not tray.geometry().isEmpty()

    def right_click() -> None:
        g = tray.geometry()
        seen["icon"] = [g.x(), g.y(), g.width(), g.height()]
        seen["icon_visible"] = tray.isVisible()
        seen["tooltip"] = tray.toolTip()
        display = {**os.environ}
        subprocess.Popen(["xdotool", "mousemove", str(g.center().x()), str(g.center().y()),
                          "click", "3"], env=display)

    def read_menu() -> None:
        seen["menu"] = texts(tray.menu)
        line = next(a for a in tray.menu.actions() if a.text().startswith(ref))
        model_menu = line.menu()
        assert model_menu is not None
        seen["model_menu"] = texts(model_menu)
        tray.menu.close()
        next(a for a in model_menu.actions() if a.text() == "Unload").trigger()

    def after_unload() -> None:
        seen["loaded_after_unload"] = [lm.model.ref for lm in window.runtime.loaded()]
        seen["menu_after_unload"] = texts(tray.menu)
        next(a for a in tray.menu.actions() if a.text() == "Quit").trigger()

    when(embedded, right_click)
    when(lambda: tray.menu.isVisible(), read_menu)
    when(lambda: not window.runtime.loaded(), after_unload)
    timer = QTimer(interval=50)
    timer.timeout.connect(tick)
    timer.start()
    seen["exit"] = app.exec()  # Quit in the menu ends the event loop
    seen["seconds"] = round(time.monotonic() - started, 1)
    window.runtime.shutdown()
    window.history.close()
    window.library.close()
    print(json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
