"""What can be checked here of the Windows and macOS packaging: the NSIS installer script
compiles (makensis, from Debian) against a stub payload laid out like the Windows bundle, and
the release workflow builds every OS from scripts that exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from app import __version__
from tests.support import REPO


def test_nsis_installer_compiles_against_a_stub_payload(tmp_path: Path) -> None:
    payload = tmp_path / "ember"
    (payload / "_internal").mkdir(parents=True)
    for exe in ("Ember.exe", "ember-cli.exe"):
        (payload / exe).write_bytes(b"MZ" + b"\0" * 1022)  # stand-ins for PyInstaller's exes
    (payload / "_internal" / "base_library.zip").write_bytes(b"PK\5\6" + b"\0" * 18)
    icons = tmp_path / "icons"
    subprocess.run([sys.executable, "packaging/icons.py", str(icons)], cwd=REPO, check=True,
                   capture_output=True)
    setup = tmp_path / f"Ember-{__version__}-setup.exe"
    out = subprocess.run(
        ["makensis", "-WX", "-V2", f"-DVERSION={__version__}", f"-DPAYLOAD={payload}",
         f"-DICON={icons / 'ember.ico'}", f"-DOUTFILE={setup}",
         str(REPO / "packaging" / "windows" / "ember.nsi")],
        capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr  # -WX: a warning fails too
    head = setup.read_bytes()[:2]
    assert head == b"MZ" and setup.stat().st_size > 30_000


def test_nsis_script_refuses_to_compile_without_a_payload(tmp_path: Path) -> None:
    out = subprocess.run(["makensis", "-V2", f"-DVERSION={__version__}",
                          f"-DOUTFILE={tmp_path / 'x.exe'}",
                          str(REPO / "packaging" / "windows" / "ember.nsi")],
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert "pass -DPAYLOAD" in out.stdout + out.stderr


def test_release_workflow_builds_every_os_from_existing_scripts() -> None:
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())
    build = workflow["jobs"]["build"]
    oses = [m["os"] for m in build["strategy"]["matrix"]["include"]]
    assert any(o.startswith("ubuntu") for o in oses)
    assert any(o.startswith("windows") for o in oses)
    assert any(o.startswith("macos") for o in oses)
    runs = " ".join(step.get("run", "") for step in build["steps"])
    for script in ("packaging/build_linux.sh", "packaging/windows/build_windows.ps1",
                   "packaging/macos/build_macos.sh"):
        assert script in runs
        assert (REPO / script).is_file()
