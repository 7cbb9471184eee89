"""`vision` shows wherever a model's abilities do: the model picker's text (and its search),
`ember list` and `ember catalog` (text and JSON), for a model with a projector and never for
one without."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from app.config import Paths
from app.gui.model_choices import local_choice, matches
from app.store import InstalledModel, Store
from tests.support.cli import ember
from tests.support.hub_repos import model_gguf, projector_gguf
from tests.support.machines import desktop


def installed_pair(home: Paths, tmp_path: Path) -> tuple[InstalledModel, InstalledModel]:
    """Two imported models, the first with a projector beside it (recorded in its manifest)."""
    store = Store(home)
    model_gguf(tmp_path / "a.gguf", name="Seeing")
    model_gguf(tmp_path / "b.gguf", name="Blind")
    seeing = store.import_gguf(tmp_path / "a.gguf")
    blind = store.import_gguf(tmp_path / "b.gguf")
    projector_gguf(seeing.path.parent / "mmproj-seeing-f16.gguf")
    seeing = replace(seeing, projector_file="mmproj-seeing-f16.gguf")
    store._write_manifest(seeing)  # what a pull with a projector writes
    return seeing, blind


def test_the_picker_says_vision_for_a_model_with_a_projector(tmp_path, isolated_home):
    seeing, blind = installed_pair(isolated_home, tmp_path)
    choice = local_choice(seeing, "llamacpp", hardware=desktop())
    assert choice.vision and "  ·  vision" in choice.text
    assert "vision: takes images (mmproj-seeing-f16.gguf)" in choice.detail
    assert matches(choice, "vision")
    other = local_choice(blind, "llamacpp", hardware=desktop())
    assert not other.vision and "vision" not in other.text and not matches(other, "vision")


def test_ember_list_shows_which_installed_models_see(tmp_path, isolated_home):
    installed_pair(isolated_home, tmp_path)
    env = {"EMBER_HOME": str(isolated_home.home)}
    rows = {line.split()[0]: line for line in ember("list", env=env).stdout.splitlines()}
    assert rows["MODEL"].split()[4] == "SEES"
    assert rows["seeing"].split()[4] == "vision" and rows["blind"].split()[4] == "-"
    listed = {m["id"]: m for m in json.loads(ember("list", "--json", env=env).stdout)}
    assert listed["seeing"]["vision"] is True and listed["blind"]["vision"] is False
    assert listed["seeing"]["projector_file"] == "mmproj-seeing-f16.gguf"


def test_ember_catalog_marks_the_registry_models_that_see():
    rows = {r["id"]: r for r in json.loads(ember("catalog", "--json").stdout)}
    assert rows["gemma-3-4b-it"]["vision"] and rows["smolvlm-256m-instruct"]["vision"]
    assert not rows["gemma-3-1b-it"]["vision"]
    q4 = next(v for v in rows["gemma-3-4b-it"]["variants"] if v["quant"] == "Q4_K_M")
    assert q4["mmproj"]["file"] == "mmproj-model-f16.gguf"
    text = {line.split()[0]: line for line in ember("catalog").stdout.splitlines() if line}
    assert "[vision]" in text["qwen3-vl-2b-instruct"] and "[vision]" not in text["qwen3-8b"]
