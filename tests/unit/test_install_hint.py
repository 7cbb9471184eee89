"""A missing optional part is explained for the install at hand: a checkout, an installed
wheel, or a bundle that cannot install anything."""

from __future__ import annotations

import sys

from app import resources
from app.install_hint import install_command, needs_extra


def test_a_checkout_is_told_the_editable_install(monkeypatch):
    assert resources.source_checkout()
    assert install_command("gui") == "pip install -e '.[gui]'"
    assert needs_extra("the window", "gui", "PySide6") == (
        "the window needs the 'gui' extra (PySide6 is missing): pip install -e '.[gui]'")


def test_an_installed_wheel_is_told_the_extra_by_name(monkeypatch, tmp_path):
    monkeypatch.setattr(resources, "SOURCE_TREE", tmp_path)  # site-packages: no pyproject.toml
    assert install_command("serve") == "pip install 'ember[serve]'"


def test_a_bundle_says_the_part_is_not_in_this_build(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", "/opt/ember/_internal", raising=False)
    assert install_command("serve") is None
    assert needs_extra("the server", "serve", "uvicorn") == (
        "the server is not part of this build of Ember (uvicorn is missing)")
