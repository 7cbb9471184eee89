"""What a projector lets a model take, from its header (app/runtime/model_traits.py): the
tiny Gemma 3 projector sees, the tiny Qwen2-Audio one hears, and the capabilities Ollama's
/api/show and `ember list` report say so."""

from __future__ import annotations

from pathlib import Path

from app.runtime.model_traits import model_traits, projector_senses
from tests.support.vision_store import install_tiny_audio, install_tiny_vision


def test_a_vision_projector_sees_and_an_audio_one_hears(tmp_path: Path):
    _, seeing, _ = install_tiny_vision(tmp_path / "v")
    _, hearing, _ = install_tiny_audio(tmp_path / "a")
    assert projector_senses(seeing.projector) == (True, False)
    assert projector_senses(hearing.projector) == (False, True)
    assert projector_senses(None) == (False, False)
    caps = model_traits(seeing).capabilities
    assert "vision" in caps and "audio" not in caps
    caps = model_traits(hearing).capabilities
    assert "audio" in caps and "vision" not in caps
