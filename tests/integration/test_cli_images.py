"""Images from the terminal, end to end on the tiny Gemma 3 vision model (random weights,
tests/support/tiny_vision.py, imported with its projector): `ember run MODEL PROMPT --image
FILE` (twice) and `/image FILE` in `ember chat`, each answered through llama.cpp's mtmd with
its image tokens counted, and the chat's question stored with its image in history.db."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image

from app.config import Paths
from app.history import History
from app.store import Store
from tests.support.cli import ember
from tests.support.tiny_vision import write_tiny_gemma3_vision


def png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, "PNG")
    return out.getvalue()


def vision_home(tmp_path: Path) -> tuple[Path, str, int]:
    home = tmp_path / "home"
    tiny = write_tiny_gemma3_vision(tmp_path / "src")
    model = Store(Paths(home)).import_gguf(tiny.model, projector=tiny.projector)
    return home, model.ref, tiny.image_tokens


def test_ember_run_answers_about_two_images(tmp_path: Path):
    home, ref, per_image = vision_home(tmp_path)
    red, blue = tmp_path / "red.png", tmp_path / "blue.png"
    red.write_bytes(png((255, 0, 0)))
    blue.write_bytes(png((0, 0, 255)))
    r = ember("run", ref, "What is in these pictures?", "--image", str(red), "--image",
              str(blue), "--max-tokens", "4", "--temperature", "0", "--json",
              env={"EMBER_HOME": str(home)}, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["media_tokens"] == 2 * per_image
    assert out["prompt_tokens"] > 2 * per_image and out["completion_tokens"] >= 1


def test_ember_chat_sends_an_image_with_the_next_message(tmp_path: Path):
    home, ref, per_image = vision_home(tmp_path)
    shot = tmp_path / "shot.png"
    shot.write_bytes(png((0, 255, 0)))
    script = "\n".join([f"/image {shot}", "What is this?", ""])
    r = ember("chat", ref, "--temperature", "0", "--max-tokens", "4", stdin=script,
              env={"EMBER_HOME": str(home)}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "(image shot.png, PNG 64x48: sent with your next message)" in r.stdout
    history = History(home / "history.db")
    try:
        [conv] = history.conversations()
        question, answer = history.messages(conv.id)
        assert question.content == "What is this?"
        assert [history.read_media(m) for m in question.media] == [shot.read_bytes()]
        assert answer.status == "complete" and answer.stats["media_tokens"] == per_image
    finally:
        history.close()
