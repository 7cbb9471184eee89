"""Documents in the window on a real X server (Xvfb and Qt's xcb platform plugin, as on a
Linux desktop; the other window tests run offscreen): a file attached through the paperclip's
file dialog, a question about it answered by the real Qwen2.5-Coder-0.5B, a second version
from Regenerate, back to the first with "<", and Ctrl+E's Markdown export, which lists the
answer and its sources (a screenshot is kept in build/ci-artifacts/). The session runs in
its own process (tests/support/documents_session.py): this test process is offscreen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from app.store import InstalledModel
from tests.support import REPO
from tests.support.desktop import desktop_env, home_with_model, xvfb

SHORT_ANSWERS = "[app]\nmax_tokens = 6\ntemperature = 0.0\n"
SCREENSHOT = REPO / "build" / "ci-artifacts" / "documents-xcb.png"  # for a person to look at
FRUIT = "The secret fruit of the garden is mango.\nNobody else knows it.\n"


def test_on_x11_a_file_is_attached_asked_about_branched_and_exported_with_its_sources(
        qwen: InstalledModel, tmp_path: Path) -> None:
    home = home_with_model(tmp_path / "home", qwen)
    (home / "config.toml").write_text(SHORT_ANSWERS, encoding="utf-8")
    document = tmp_path / "fruit.txt"
    document.write_text(FRUIT, encoding="utf-8")
    export, result = tmp_path / "out" / "fruit chat.md", tmp_path / "result.json"
    with xvfb() as display:
        done = subprocess.run(
            [sys.executable, "-m", "tests.support.documents_session", str(document),
             str(export), str(result), str(SCREENSHOT)], env=desktop_env(display, home), cwd=REPO,
            capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    seen = json.loads(result.read_text(encoding="utf-8"))
    assert seen["platform"] == "xcb"
    assert "mango" in seen["first"].lower()
    assert seen["sources"].startswith("Sources: fruit.txt, line")
    assert seen["second_sources"] == seen["sources"]  # the regenerate got the same pieces
    assert (seen["label"], seen["shown"], seen["shown_sources"]) == (
        "1/2", seen["first"], seen["sources"])
    markdown = export.read_text(encoding="utf-8")
    assert "# What is the secret fruit? One word." in markdown
    assert "### Ember (version 1 of 2)\n\n" + seen["first"] in markdown
    citation = seen["sources"].removeprefix("Sources: ")
    assert f"Sources:\n\n- {citation}" in markdown
