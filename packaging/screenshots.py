"""Screenshots of the window's main states for the README (docs/screenshots/*.png).

    QT_QPA_PLATFORM=offscreen python packaging/screenshots.py [OUT_DIR]

Uses the installed Qwen2.5-Coder-0.5B (EMBER_HOME, or the test home) for a real answer.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtWidgets import QApplication

from app.config import Paths, paths
from app.gui import build_window
from app.gui.settings_dialog import SettingsDialog
from app.gui.theme import apply_theme
from app.runtime import Runtime
from app.store import Store


def settle(app: QApplication, seconds: float = 0.3) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshots")
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication([])
    apply_theme(app, "light", 11)
    models = paths().models
    with tempfile.TemporaryDirectory() as tmp:
        empty = Paths(Path(tmp) / "first-run")
        with Runtime(store=Store(empty)) as rt:
            first = build_window(home=empty, runtime=rt)
            first.show()
            settle(app)
            first.grab().save(str(out / "first-run.png"))
            first.close()

        home = Paths(Path(tmp) / "home")
        home.home.mkdir(parents=True)
        os.symlink(models, home.models)
        with Runtime(store=Store(home)) as rt:
            w = build_window(home=home, runtime=rt)
            w.settings.temperature, w.settings.max_tokens = 0.0, 200
            w.show()
            w.new_chat()
            w.chat.composer.setPlainText("Write a Python function that checks whether a string "
                                         "is a palindrome, with a short explanation.")
            w.controller.send()
            while w.controller.busy:
                settle(app, 0.05)
            settle(app)
            w.grab().save(str(out / "chat.png"))
            w.show_hub("qwen2.5-coder-1.5b-instruct")
            settle(app)
            w.grab().save(str(out / "hub.png"))
            dialog = SettingsDialog(w.settings, rt.hardware, "", [m.ref for m in rt.list_models()],
                                    w.server_text, False)
            dialog.show()
            settle(app)
            dialog.grab().save(str(out / "settings.png"))
            dialog.close()
            apply_theme(app, "dark", 11)
            w.chat.dark = True
            w.controller.open(w.controller.conversation_id)
            w.show_chat()
            settle(app)
            w.grab().save(str(out / "chat-dark.png"))
            w.close()
    print(f"screenshots in {out}", flush=True)
    # PySide6 6.12 can abort while the interpreter garbage-collects leftover widgets of a
    # script like this one (two windows and a dialog built and closed in one go); the
    # files are written, so leave without that final collection.
    os._exit(0)


if __name__ == "__main__":
    main()
