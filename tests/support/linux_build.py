"""The Linux build the packaging tests check (packaging/build_linux.sh, the command a release
uses, into build/packaging-test/), started in the background as soon as the run is known to
need it: the tiers before the packaging tests (unit first) mostly keep one of the two cores
idle, and the build (pip, PyInstaller, the instruction check, deb and tarball) takes about
5 minutes of one core. It runs at the lowest priority, on the time the tests leave idle; the
packaging tests' fixture waits for what is left of it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.support import REPO

BUILD = REPO / "build" / "packaging-test"
DIST = BUILD / "dist"
LOG = BUILD / "build.log"
TIMEOUT_S = 3000


@dataclass
class BackgroundBuild:
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    started: float

    def wait(self) -> None:
        """Until the build ends; an AssertionError with its log's tail if it failed."""
        left = TIMEOUT_S - (time.monotonic() - self.started)
        try:
            code = self.process.wait(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.wait()
        self.log.close()
        if code != 0:
            tail = LOG.read_bytes()[-8000:].decode(errors="replace")
            raise AssertionError(f"packaging/build_linux.sh failed ({code}):\n{tail}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()
            self.process.wait()
        self.log.close()

    def kill(self) -> None:
        """The build's whole process group: bash, pip, PyInstaller, objdump. Killing bash
        alone would leave PyInstaller writing into build/ for the next run to clash with."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


_build: BackgroundBuild | None = None


def start() -> BackgroundBuild:
    """The build, started now unless it already was (once per test session)."""
    global _build
    if _build is None:
        shutil.rmtree(DIST, ignore_errors=True)
        BUILD.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "EMBER_DIST": str(DIST), "EMBER_BUILD_DIR": str(BUILD / "work")}
        env.pop("QT_QPA_PLATFORM", None)
        log = LOG.open("wb")
        # At the lowest priority: it runs on what the tests leave idle. A test that keeps both
        # cores busy slows down far more than the build's one core (llama.cpp's two threads
        # wait for each other at every op): Claude Code's test took 532 s beside the build at
        # the same priority, 321 s alone.
        process = subprocess.Popen(["nice", "-n", "19", "bash", "packaging/build_linux.sh"],
                                   cwd=REPO, env=env,
                                   stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        _build = BackgroundBuild(process, log, time.monotonic())
        # Reaped as soon as it ends: a finished child left unwaited is a zombie under pytest
        # until the packaging tier, and tests that list this process's children (MCP servers'
        # lifetimes) fail on it (psutil.ZombieProcess).
        threading.Thread(target=process.wait, name="linux-build-reaper", daemon=True).start()
    return _build


def stop() -> None:
    """End a build still running (a run interrupted or without the packaging tests)."""
    if _build is not None:
        _build.stop()


def dist() -> Path:
    """The finished build's dist folder (starting the build here if nothing did)."""
    start().wait()
    return DIST
