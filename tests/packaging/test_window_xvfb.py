"""The bundle's window on a real X server (Xvfb, Qt's xcb platform plugin, not offscreen): it
opens with Ember's window class, a typed prompt is answered and stored in history.db, and a
screenshot is kept in build/ci-artifacts/."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
from pathlib import Path

from app.store import InstalledModel
from tests.packaging.conftest import LinuxBuild
from tests.support.desktop import (
    MAIN_WINDOW,
    desktop_env,
    find_window,
    home_with_model,
    screenshot,
    type_text,
    wait_for_answer,
    wm_class,
    xvfb,
)

PROMPT = "Write a Python function that adds two numbers."
SHORT_ANSWERS = "[app]\nmax_tokens = 48\ntemperature = 0.0\n"


def test_window_answers_a_typed_prompt(linux_build: LinuxBuild, qwen: InstalledModel,
                                       tmp_path: Path, artifacts: Path) -> None:
    home = home_with_model(tmp_path / "home", qwen)
    (home / "config.toml").write_text(SHORT_ANSWERS)
    with xvfb() as display:
        app = subprocess.Popen([linux_build.binary], env=desktop_env(display, home),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            window, seconds = find_window(display, "ember", title=MAIN_WINDOW, owner=app)
            assert '"ember", "Ember"' in wm_class(display, window)
            type_text(display, window, PROMPT)
            answer = wait_for_answer(home / "history.db", PROMPT, timeout=300)
            assert "def " in answer, answer
            screenshot(display, artifacts / "window-xvfb.png")
            assert app.poll() is None, app.stdout.read() if app.stdout else ""
        finally:
            app.terminate()
            out, _ = app.communicate(timeout=30)
    assert "Could not load the Qt platform plugin" not in out, out


def test_a_failed_start_shows_a_message_box_and_leaves_a_report(linux_build: LinuxBuild,
                                                                tmp_path: Path) -> None:
    """Started from a file manager there is no terminal: the frozen window's start-up failure
    is a message box and a crash report."""
    home = tmp_path / "home"
    home.mkdir()
    # a history from a newer Ember (WAL, as Ember's are): the user went back a version
    with contextlib.closing(sqlite3.connect(home / "history.db", isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT)")
        db.execute("PRAGMA user_version=99")
    before = (home / "history.db").read_bytes()
    with xvfb() as display:
        app = subprocess.Popen([linux_build.binary], env=desktop_env(display, home),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            find_window(display, "ember", title="^Ember could not start")
            [report] = list((home / "logs").glob("crash-*.log"))
            body = report.read_text(encoding="utf-8")
            assert "frozen: yes" in body and "newer Ember (schema 99)" in body
        finally:
            app.terminate()
            app.communicate(timeout=30)
    assert (home / "history.db").read_bytes() == before  # the user's history is untouched
