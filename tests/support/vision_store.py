"""A store holding the tiny vision models (tests/support/tiny_vision.py) or the tiny audio
model (tests/support/tiny_audio.py) as a user's import with their projectors (`ember import
MODEL --mmproj FILE`), for tests of the whole path: the server's dialects, the chat session,
the window, the CLI."""

from __future__ import annotations

from pathlib import Path

from app import config
from app.store import InstalledModel, Store
from tests.support.tiny_audio import TinyAudioModel, write_tiny_qwen2_audio
from tests.support.tiny_vision import (
    TinyVisionModel,
    write_tiny_gemma3_vision,
    write_tiny_qwen2vl_vision,
)


def install_tiny_vision(home: Path, family: str = "gemma3"
                        ) -> tuple[Store, InstalledModel, TinyVisionModel]:
    """A store in `home` (EMBER_HOME's layout) with the tiny `family` vision model installed
    with its projector. The caller points EMBER_HOME at `home` where the app reads it."""
    write = write_tiny_gemma3_vision if family == "gemma3" else write_tiny_qwen2vl_vision
    tiny = write(home.parent / f"{home.name}-src-{family}")
    store = Store(config.Paths(home=config.private_dir(home)))
    model = store.import_gguf(tiny.model, projector=tiny.projector)
    return store, model, tiny


def install_tiny_audio(home: Path) -> tuple[Store, InstalledModel, TinyAudioModel]:
    """A store in `home` with the tiny Qwen2-Audio model (tests/support/tiny_audio.py)
    installed with its audio projector, as `ember import MODEL --mmproj FILE` does."""
    tiny = write_tiny_qwen2_audio(home.parent / f"{home.name}-src-qwen2a")
    store = Store(config.Paths(home=config.private_dir(home)))
    model = store.import_gguf(tiny.model, projector=tiny.projector)
    return store, model, tiny
