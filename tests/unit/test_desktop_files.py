"""The Linux desktop files validate with the freedesktop and AppStream tools (apt packages
desktop-file-utils and appstream) and agree with app.identity and the package's version."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

from app import __version__
from app.identity import APP_ID, APP_NAME, WM_CLASS
from tests.support import REPO

LINUX = REPO / "packaging" / "linux"
DESKTOP = LINUX / f"{APP_ID}.desktop"
METAINFO = LINUX / f"{APP_ID}.metainfo.xml"


def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: apt-get install {package}"
    return path


def test_the_desktop_file_validates_without_a_remark():
    done = subprocess.run([tool("desktop-file-validate", "desktop-file-utils"), str(DESKTOP)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stdout + done.stderr


def test_the_metainfo_validates_offline():
    done = subprocess.run([tool("appstreamcli", "appstream"), "validate", "--no-net",
                           str(METAINFO)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith(("E:", "W:"))], done.stdout


def test_the_desktop_file_names_the_app_id_icon_and_wm_class():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # keys are case-sensitive
    entry.read(DESKTOP, encoding="utf-8")
    d = entry["Desktop Entry"]
    assert (d["Name"], d["Icon"], d["StartupWMClass"]) == (APP_NAME, APP_ID, WM_CLASS)
    assert d["Exec"].split()[0] == "ember" and d["Terminal"] == "false"


def test_the_metainfo_launches_the_desktop_file_and_lists_this_version():
    root = ET.parse(METAINFO).getroot()
    assert root.findtext("id") == APP_ID
    assert root.findtext("launchable") == DESKTOP.name
    assert root.findtext("provides/binary") == "ember"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    newest = root.find("releases/release")
    assert newest is not None
    assert newest.get("version") == pyproject["project"]["version"] == __version__
    shots = [Path(i.text or "").name for i in root.iter("image")]
    assert shots and all((REPO / "docs" / "screenshots" / s).is_file() for s in shots)
