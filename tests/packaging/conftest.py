"""The Linux build, made once per test session by the same command a release uses
(packaging/build_linux.sh), into build/packaging-test/. What a person should look at (the
screenshots, the build report) is copied to build/ci-artifacts/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from app import __version__
from tests.support import REPO

BUILD = REPO / "build" / "packaging-test"
ARTIFACTS = REPO / "build" / "ci-artifacts"


@dataclass(frozen=True)
class LinuxBuild:
    dist: Path
    report: dict

    @property
    def bundle(self) -> Path:
        return self.dist / "ember"

    @property
    def binary(self) -> Path:
        return self.bundle / "ember"

    @property
    def deb(self) -> Path:
        return self.dist / f"ember_{__version__}_amd64.deb"

    @property
    def tarball(self) -> Path:
        return self.dist / f"ember-{__version__}-linux-x86_64.tar.zst"

    @property
    def appdir(self) -> Path:
        return self.dist / "Ember.AppDir"


@pytest.fixture(scope="session")
def linux_build() -> LinuxBuild:
    dist = BUILD / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    env = {**os.environ, "EMBER_DIST": str(dist), "EMBER_BUILD_DIR": str(BUILD / "work")}
    env.pop("QT_QPA_PLATFORM", None)
    out = subprocess.run(["bash", "packaging/build_linux.sh"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=3000)
    if out.returncode != 0:
        raise AssertionError(f"packaging/build_linux.sh failed ({out.returncode}):\n"
                             f"{out.stdout[-4000:]}\n{out.stderr[-6000:]}")
    report = json.loads((dist / "build-report.json").read_text())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy2(dist / "build-report.json", ARTIFACTS / "build-report.json")
    return LinuxBuild(dist, report)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
