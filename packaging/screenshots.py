"""Screenshots of every page of the window, light and dark, for the README and the metainfo
(docs/screenshots/PAGE.png and PAGE-dark.png), from the real app:

    QT_QPA_PLATFORM=offscreen python packaging/screenshots.py [OUT_DIR]

Pages: first-run (an empty data folder), chat (a real answer of the installed
Qwen2.5-Coder-0.5B, EMBER_HOME or the test home), documents (a file attached, asked about,
its Sources opened), models, machine, server (running), settings, switcher (Ctrl+K) and find
(Ctrl+F).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QApplication, QWidget

from app.config import Paths, paths
from app.gui import build_window
from app.gui.main_window import MainWindow
from app.gui.settings_dialog import SettingsDialog
from app.gui.theme import apply_theme
from app.runtime import Runtime
from app.store import Store

THEMES = {"light": "", "dark": "-dark"}
QUESTION = ("Write a Python function that checks whether a string is a palindrome, with a "
            "short explanation.")
NOTES = """# Release plan

- 2.0 beta: March 3, for the people on the test list.
- 2.0 release: April 14, after the translations are in.
- Known issue: the installer needs 600 MB free on the system disk.
"""
DOCUMENT_QUESTION = "When is the 2.0 release, and what does the installer need?"


def settle(app: QApplication, seconds: float = 0.4) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def use_theme(app: QApplication, w: MainWindow, theme: str) -> None:
    apply_theme(app, theme, 11)
    w.chat.dark = theme == "dark"
    if w.controller.conversation_id is not None:
        w.controller.open(w.controller.conversation_id)  # the messages re-render in it


def shoot(app: QApplication, widget: QWidget, out: Path, name: str, theme: str,
          popup: QWidget | None = None) -> None:
    """`popup`: a window of its own over `widget` (grab() draws one window), drawn in."""
    settle(app)
    path = out / f"{name}{THEMES[theme]}.png"
    picture = widget.grab()
    if popup is not None:
        painter = QPainter(picture)
        painter.drawPixmap(popup.mapToGlobal(QPoint(0, 0)) - widget.mapToGlobal(QPoint(0, 0)),
                           popup.grab())
        painter.end()
    picture.save(str(path))
    print(f"  {path}", flush=True)


def open_chat(w: MainWindow, conv_id: int) -> None:
    """As a click on the conversation in the list."""
    items = w.conversations.list
    for row in range(items.count()):
        if items.item(row).data(Qt.ItemDataRole.UserRole) == conv_id:
            items.setCurrentItem(items.item(row))


def unfold_sources(w: MainWindow) -> None:
    for message in w.chat.messages:
        block = getattr(message, "sources", None)
        if block is not None and not block.isHidden() and not block.unfolded:
            block.toggle.click()


def ask(app: QApplication, w: MainWindow, question: str) -> None:
    w.chat.composer.setPlainText(question)
    w.controller.send()
    while w.controller.busy:
        settle(app, 0.05)


def pages(app: QApplication, w: MainWindow, out: Path, theme: str,
          settings: Callable[[], SettingsDialog]) -> None:
    use_theme(app, w, theme)
    w.show_chat()
    chats = [c.id for c in w.history.conversations()]  # newest first: the documents chat
    open_chat(w, chats[0])
    unfold_sources(w)
    shoot(app, w, out, "documents", theme)
    open_chat(w, chats[1])
    shoot(app, w, out, "chat", theme)
    w.show_hub("qwen2.5-coder-1.5b-instruct")
    shoot(app, w, out, "models", theme)
    w.show_machine()
    shoot(app, w, out, "machine", theme)
    w.show_server()
    shoot(app, w, out, "server", theme)
    dialog = settings()
    dialog.show()
    shoot(app, dialog, out, "settings", theme)
    dialog.close()
    w.show_chat()
    w.open_model_switcher()
    if w.switcher is not None:
        w.switcher.filter.setText("coder")
        shoot(app, w, out, "switcher", theme, popup=w.switcher)
        w.switcher.close()
    w.find_in_chat()
    w.chat.find_bar.field.setText("palindrome")
    shoot(app, w, out, "find", theme)
    w.chat.find_bar.close_bar()


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshots")
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication([])
    models = paths().models
    with tempfile.TemporaryDirectory() as tmp:
        for theme in THEMES:
            empty = Paths(Path(tmp) / f"first-run-{theme}")
            with Runtime(store=Store(empty)) as rt:
                apply_theme(app, theme, 11)
                first = build_window(home=empty, runtime=rt)
                first.resize(1240, 800)
                first.show()
                shoot(app, first, out, "first-run", theme)
                first.close()

        home = Paths(Path(tmp) / "home")
        home.home.mkdir(parents=True)
        os.symlink(models, home.models)
        with Runtime(store=Store(home)) as rt:
            apply_theme(app, "light", 11)
            w = build_window(home=home, runtime=rt)
            w.settings.temperature, w.settings.max_tokens = 0.0, 160
            w.resize(1240, 800)
            w.show()
            w.new_chat()
            ask(app, w, QUESTION)
            w.new_chat()
            notes = Path(tmp) / "release-plan.md"
            notes.write_text(NOTES, encoding="utf-8")
            w.controller.attach_files([notes])
            while w.controller.documents is not None and w.controller.documents.attaching:
                settle(app, 0.05)
            ask(app, w, DOCUMENT_QUESTION)
            w.toggle_server()
            while "key:" not in w.server_text and w.server is not None:
                settle(app, 0.05)
            for theme in THEMES:
                pages(app, w, out, theme, lambda: SettingsDialog(
                    w.settings, rt.hardware, "", [m.ref for m in rt.list_models()],
                    home=home, model=w.controller.model))
            w.close()
    print(f"screenshots in {out}", flush=True)
    # PySide6 6.12 can abort while the interpreter garbage-collects leftover widgets of a
    # script like this one (windows and dialogs built and closed in one go); the files are
    # written, so leave without that final collection.
    os._exit(0)


if __name__ == "__main__":
    main()
