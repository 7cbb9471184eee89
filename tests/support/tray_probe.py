"""Ember started in the tray on a real X server (`python -m tests.support.tray_probe MODEL
WAIT_S`, with DISPLAY and EMBER_HOME set): the window's own start path (app.gui.start with
in_tray, as `ember gui --tray` runs it, waiting WAIT_S for a tray), then, once the tray host
has the icon, the model loaded and listed, the icon right-clicked with xdotool where the tray
put it, its menu read, the model unloaded from it, and Quit. Prints a JSON line once started
(`"phase": "started"`) and one of all it saw at the end; tests/gui/test_tray_xcb.py asserts
on them. Without a tray it reports the window shown instead.

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

import app.gui
from app.config import paths
from app.gui import identify, start

TIMEOUT_S = 90.0


def texts(menu: QMenu) -> list[str]:
    return [a.text() for a in menu.actions() if not a.isSeparator()]


def main(ref: str, wait_s: float) -> int:
    qt = QApplication([sys.argv[0]])
    identify(qt)
    app.gui.TRAY_WAIT_S = wait_s
    window = start(qt, paths(), in_tray=True)
    seen: dict = {"phase": "started", "platform": qt.platformName(),
                  "available": QSystemTrayIcon.isSystemTrayAvailable(),
                  "tray": window.tray is not None, "window_visible": window.isVisible()}
    print(json.dumps(seen), flush=True)
    seen["phase"] = "end"
    seen["hidden_while_waiting"] = True
    steps: list[Callable[[], bool]] = []  # each: done (True) or not yet
    started = time.monotonic()

    def tick() -> None:
        if time.monotonic() - started > TIMEOUT_S:
            seen["timed_out_at_step"] = len(seen.get("done", []))
            qt.quit()
        elif steps and steps[0]():
            seen.setdefault("done", []).append(steps.pop(0).__name__)

    def icon_placed() -> bool:
        if window.tray is None:
            if window.isVisible():  # no tray came: the window instead
                seen["shown_without_tray"] = True
                steps.clear()
                qt.quit()
            return False
        tray = window.tray
        # Qt reports 22x22 at the origin until the host has embedded the icon; the test's
        # host (trayer) sits at the screen's top right
        if tray.geometry().isEmpty() or tray.geometry().x() == 0:
            seen["hidden_while_waiting"] &= not window.isVisible()
            return False
        seen["window_visible_with_tray"] = window.isVisible()
        window.runtime.load(ref, context=2048)  # as a chat or the API server would
        return True

    def model_listed() -> bool:  # the status line's next probe finds it
        tray = window.tray
        assert tray is not None
        if ref not in tray.toolTip():
            return False
        g = tray.geometry()
        seen["icon"] = [g.x(), g.y(), g.width(), g.height()]
        seen["icon_visible"] = tray.isVisible()
        subprocess.Popen(["xdotool", "mousemove", str(g.center().x()), str(g.center().y()),
                          "click", "3"], env=dict(os.environ))
        return True

    def menu_opened() -> bool:
        assert window.tray is not None
        menu = window.tray.menu
        if not menu.isVisible():
            return False
        seen["menu"] = texts(menu)
        seen["tooltip"] = window.tray.toolTip()  # rebuilt with the menu as it opened
        line = next(a for a in menu.actions() if a.text().startswith(ref))
        model_menu = line.menu()
        assert model_menu is not None
        seen["model_menu"] = texts(model_menu)
        menu.close()
        next(a for a in model_menu.actions() if a.text() == "Unload").trigger()
        return True

    def unloaded() -> bool:
        return not window.runtime.loaded()

    def menu_followed() -> bool:
        # the menu follows the status line's next probe, which runs off the UI thread: a
        # moment after the unload, not at once
        assert window.tray is not None
        if ref in window.tray.toolTip():
            return False
        seen["menu_after_unload"] = texts(window.tray.menu)
        next(a for a in window.tray.menu.actions() if a.text() == "Quit").trigger()
        return True

    steps += [icon_placed, model_listed, menu_opened, unloaded, menu_followed]
    timer = QTimer(interval=50)
    timer.timeout.connect(tick)
    timer.start()
    seen["exit"] = qt.exec()  # Quit in the menu ends the event loop
    seen["seconds"] = round(time.monotonic() - started, 1)
    window.runtime.shutdown()
    window.history.close()
    window.library.close()
    print(json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
