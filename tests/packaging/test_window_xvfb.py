"""The bundle's window on a real X server (Xvfb, Qt's xcb platform plugin, not offscreen): it
opens with Ember's window class, a typed prompt is answered and stored in history.db, and a
screenshot is kept in build/ci-artifacts/."""

from __future__ import annotations

import subprocess
from pathlib import Path

from app.store import InstalledModel
from tests.packaging.conftest import LinuxBuild
from tests.support.desktop import (
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
            window, seconds = find_window(display, "ember")
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
