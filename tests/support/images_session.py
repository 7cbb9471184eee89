"""One user's session with images in the real window, run in a process of its own on the X
server of DISPLAY (tests/gui/test_images_xcb.py): an image copied to the X clipboard is
pasted into the message box with Ctrl+V (xdotool's XTEST keys), its chip shows a thumbnail, a
question is typed and sent, its bubble holds the image and the model answers; then the
window is closed and built
again (a restart) and the conversation, opened, shows it again; the chat is exported as
Markdown with the image beside it.

    python -m tests.support.images_session MODEL EXPORT.md RESULT.json SCREENSHOT.png

EMBER_HOME holds MODEL (a model with a projector). What it saw goes to RESULT.json; any step
that does not happen is an AssertionError (exit status 1, the traceback on stderr).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from tests.support.documents_session import wait_until


def xdotool(*args: str) -> None:
    subprocess.run(["xdotool", *args], check=True, capture_output=True,
                   env={**os.environ})


def bubble_sizes(w) -> list[tuple[int, int]]:
    question = next(m for m in w.chat.messages if m.role == "user")
    return [(label.pixmap().width(), label.pixmap().height())
            for label in question.images.labels]


def run(model: str, export: Path, screenshot: Path) -> dict:
    from app.export import export_file
    from app.gui import build_window

    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    w = build_window()
    try:
        w.show()
        w.activateWindow()
        assert QTest.qWaitForWindowExposed(w, 30_000), "the window was not shown"
        w.show_chat()
        w.controller.model = model
        shot = QImage(800, 500, QImage.Format.Format_RGB32)
        shot.fill(Qt.GlobalColor.darkGreen)
        QGuiApplication.clipboard().setImage(shot)  # as a screenshot tool leaves it
        w.chat.composer.setFocus()
        window = str(int(w.winId()))
        xdotool("windowfocus", "--sync", window)
        xdotool("key", "ctrl+v")
        wait_until(app, lambda: len(w.chat.image_chips.chips) == 1, "the image's chip", 30)
        chip = w.chat.image_chips.chips[0]
        thumb = (chip.thumb.pixmap().width(), chip.thumb.pixmap().height())
        xdotool("type", "--delay", "20", "What is in this picture?")
        xdotool("key", "Return")
        wait_until(app, lambda: any(m.role == "user" for m in w.chat.messages),
                   "the question's bubble", 30)
        sent = bubble_sizes(w)
        wait_until(app, lambda: not w.controller.busy, "the answer", 300)
        conv = w.controller.conversation_id
        assert conv is not None
        answer = w.history.messages(conv)[-1]
        banner = w.chat.banner_message()
        app.processEvents()
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        w.grab().save(str(screenshot))
        typed = next(m for m in w.chat.messages if m.role == "user").text
    finally:
        w.close()
        w.history.close()
        w.library.close()
    again = build_window(runtime=w.runtime)
    try:
        again.show()
        assert QTest.qWaitForWindowExposed(again, 30_000), "the window was not shown again"
        assert conv is not None
        again.controller.open(conv)
        reopened = bubble_sizes(again)
        export_file(again.history, export, [conv])
    finally:
        again.close()
        again.runtime.shutdown()
        again.history.close()
        again.library.close()
    return {"platform": app.platformName(), "thumb": thumb, "sent": sent,
            "reopened": reopened, "typed": typed, "answer_status": answer.status,
            "media_tokens": (answer.stats or {}).get("media_tokens"), "banner": banner}


def main() -> None:
    model, export, result, screenshot = sys.argv[1], *(Path(a) for a in sys.argv[2:5])
    result.write_text(json.dumps(run(model, export, screenshot)), encoding="utf-8")


if __name__ == "__main__":
    main()
