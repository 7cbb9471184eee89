"""`ember import MODEL --mmproj FILE`: a user's own vision GGUF keeps its projector beside
it in the store, and a file that is not a projector is refused (app/store.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import config
from app.store import Store
from backends.errors import EmberError
from tests.support.tiny_vision import write_tiny_gemma3_vision


def test_an_imported_model_keeps_its_projector(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("EMBER_HOME", str(tmp_path / "home"))
    tiny = write_tiny_gemma3_vision(tmp_path / "src")
    store = Store(config.paths())
    model = store.import_gguf(tiny.model, projector=tiny.projector)
    assert model.projector is not None and model.projector.name == tiny.projector.name
    assert model.projector.read_bytes() == tiny.projector.read_bytes()
    again = store.get(model.ref)
    assert again.projector == model.projector
    assert tiny.projector.exists()  # the original is kept


def test_a_model_file_is_not_a_projector(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("EMBER_HOME", str(tmp_path / "home"))
    tiny = write_tiny_gemma3_vision(tmp_path / "src")
    with pytest.raises(EmberError, match="not a projector"):
        Store(config.paths()).import_gguf(tiny.model, projector=tiny.model)
