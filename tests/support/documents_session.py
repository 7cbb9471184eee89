"""One user's session with documents in the real window, run in a process of its own on the X
server of DISPLAY (tests/gui/test_documents_xcb.py): the paperclip's file dialog attaches a
file, a question about it is typed and answered, Regenerate makes a second version and "<"
on the switcher goes back to the first, and Ctrl+E exports the conversation as Markdown.

    python -m tests.support.documents_session FILE EXPORT.md RESULT.json SCREENSHOT.png

EMBER_HOME holds the model and config.toml. What it saw goes to RESULT.json; any step that
does not happen is an AssertionError (exit status 1, the traceback on stderr).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEventLoop, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

WAIT_S = 300


def wait_until(app: QApplication, done: Callable[[], bool], what: str,
               timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.01)


def run(document: Path, export: Path, screenshot: Path) -> dict:
    from app.gui import build_window
    from app.gui.branch_switcher import BranchSwitcher

    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    w = build_window()
    try:
        w.show()
        w.activateWindow()
        assert QTest.qWaitForWindowExposed(w, 30_000), "the window was not shown"
        w.show_chat()
        controller = w.controller

        QTest.mouseClick(w.chat.attach, Qt.MouseButton.LeftButton)  # the paperclip
        dialog = w.chat.file_dialog
        assert dialog is not None and dialog.isVisible(), "no file dialog"
        dialog.selectFile(str(document))
        dialog.accept()
        wait_until(app, lambda: w.chat.chips.names() == [document.name], "the chip")

        w.activateWindow()
        QTest.qWaitForWindowActive(w, 10_000)
        w.chat.composer.setFocus()
        QTest.keyClicks(w.chat.composer, "What is the secret fruit? One word.")
        QTest.keyClick(w.chat.composer, Qt.Key.Key_Return)
        wait_until(app, lambda: controller.busy, "the answer to start", 30)
        wait_until(app, lambda: not controller.busy, "the answer")
        assert controller.task is None and len(w.chat.messages) == 2, w.chat.banner_message()
        first = w.chat.messages[1].text
        sources = w.chat.messages[1].sources.toggle.text()

        QTest.mouseClick(w.chat.regenerate, Qt.MouseButton.LeftButton)
        wait_until(app, lambda: not controller.busy, "the second version")
        switcher = w.chat.messages[1].findChild(BranchSwitcher)
        assert switcher is not None and switcher.label.text() == "2/2"
        second_sources = w.chat.messages[1].sources.toggle.text()
        QTest.mouseClick(switcher.previous, Qt.MouseButton.LeftButton)  # "<"
        wait_until(app, lambda: w.chat.messages[1].findChild(BranchSwitcher) is not None,
                   "the first version", 10)
        label = w.chat.messages[1].findChild(BranchSwitcher).label.text()
        shown = w.chat.messages[1].text
        shown_sources = w.chat.messages[1].sources.toggle.text()

        w.activateWindow()
        QTest.qWaitForWindowActive(w, 10_000)
        QTest.keyClick(w, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
        wait_until(app, lambda: w.export_dialog is not None and w.export_dialog.isVisible(),
                   "the export dialog (Ctrl+E)", 10)
        assert w.export_dialog is not None
        w.export_dialog.path.setText(str(export))
        QTest.mouseClick(w.export_dialog.save_button, Qt.MouseButton.LeftButton)
        wait_until(app, lambda: export.exists(), "the export file", 10)
        w.chat.messages[1].sources.toggle.click()  # for a person to look at: the pieces
        app.processEvents()
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        w.grab().save(str(screenshot))
        return {"platform": app.platformName(), "first": first, "sources": sources,
                "second_sources": second_sources, "label": label, "shown": shown,
                "shown_sources": shown_sources}
    finally:
        w.close()
        w.runtime.shutdown()
        w.history.close()
        w.library.close()


def main() -> None:
    document, export, result, screenshot = (Path(a) for a in sys.argv[1:5])
    result.write_text(json.dumps(run(document, export, screenshot)), encoding="utf-8")


if __name__ == "__main__":
    main()
