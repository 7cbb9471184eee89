"""The `ember` command as a user runs it: `python -m app.cli` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import REPO


def ember(*args: str, stdin: str | None = None, env: dict | None = None,
          timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
