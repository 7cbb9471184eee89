"""Importing a real GGUF into the store."""

from __future__ import annotations

from app.store import Store


def test_import_of_a_real_gguf(isolated_home, gemma):
    model = Store(isolated_home).import_gguf(gemma.path)
    assert (model.id, model.quant, model.architecture) == ("gemma-3-270m", "Q4_K_M", "gemma3")
    assert model.sha256 == gemma.sha256
