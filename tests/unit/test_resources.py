"""Ember finds its registry and assets in each layout it ships in: the source tree, an
installed wheel (app/_data/) and a PyInstaller bundle (sys._MEIPASS)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from app import config, resources
from app.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]


def test_from_the_source_tree_the_repository_files_are_used(monkeypatch):
    monkeypatch.delenv("EMBER_REGISTRY", raising=False)
    assert not resources.frozen()
    assert config.registry_file() == ROOT / "models.yaml"
    assert resources.asset("style-dark.qss") == ROOT / "assets" / "style-dark.qss"
    assert resources.asset("style-dark.qss").is_file()
    assert resources.source_checkout()


def test_the_rail_icons_are_assets_that_ship_in_every_layout(tmp_path, monkeypatch):
    from app.gui.nav_rail import PAGES, SETTINGS, SHORTCUTS

    names = [f"icons/{item.name}.svg" for item in (*PAGES, SETTINGS, SHORTCUTS)]
    for name in names:
        assert "currentColor" in resources.asset(name).read_text()  # drawn in the theme's color
    packaged = copy_data(tmp_path / "app" / "_data")  # as setup.py and the spec copy assets/
    monkeypatch.setattr(resources, "PACKAGED", packaged)
    assert all(resources.asset(name) == packaged / "assets" / name for name in names)
    assert all(resources.asset(name).is_file() for name in names)


def copy_data(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "models.yaml", folder / "models.yaml")
    shutil.copytree(ROOT / "assets", folder / "assets")
    return folder


def test_an_installed_wheel_reads_its_packaged_copy(tmp_path, monkeypatch):
    monkeypatch.delenv("EMBER_REGISTRY", raising=False)
    packaged = copy_data(tmp_path / "app" / "_data")
    monkeypatch.setattr(resources, "PACKAGED", packaged)
    assert config.registry_file() == packaged / "models.yaml"
    assert resources.asset("style-light.qss") == packaged / "assets" / "style-light.qss"
    assert "qwen2.5-coder-0.5b-instruct" in load_registry().ids()


def test_a_pyinstaller_bundle_reads_its_internal_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("EMBER_REGISTRY", raising=False)
    internal = copy_data(tmp_path / "ember" / "_internal")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(internal), raising=False)
    assert resources.frozen() and not resources.source_checkout()
    assert config.registry_file() == internal / "models.yaml"
    assert resources.asset("style-dark.qss").read_text() == (
        ROOT / "assets" / "style-dark.qss").read_text()
    assert "gemma-3-270m" in load_registry().ids()


def test_ember_registry_still_overrides_every_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    monkeypatch.setenv("EMBER_REGISTRY", str(tmp_path / "mine.yaml"))
    assert config.registry_file() == tmp_path / "mine.yaml"

