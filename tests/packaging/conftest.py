"""The Linux build, made once per test session by the same command a release uses
(packaging/build_linux.sh), into build/packaging-test/: started in the background when the
run's tests are collected (tests/support/linux_build.py), waited for here. What a person
should look at (the screenshots, the build report) is copied to build/ci-artifacts/."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from app import __version__
from tests.support import REPO
from tests.support import linux_build as linux_build_in_background

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
    dist = linux_build_in_background.dist()
    report = json.loads((dist / "build-report.json").read_text())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy2(dist / "build-report.json", ARTIFACTS / "build-report.json")
    return LinuxBuild(dist, report)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
