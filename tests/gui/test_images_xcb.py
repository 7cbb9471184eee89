"""Images in the window on a real X server (Xvfb and Qt's xcb platform plugin; the other
window tests run offscreen): an image on the X clipboard pasted with Ctrl+V through xdotool,
its chip's thumbnail, the sent question's bubble and its answer, the same bubble after a
restart, and the
Markdown export with the image file beside it (a screenshot is kept in build/ci-artifacts/).
The session runs in its own process (tests/support/images_session.py).

The model is the tiny Gemma 3 vision model (random weights, tests/support/tiny_vision.py)
imported with its projector: its answer is noise, made through llama.cpp's mtmd."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from app.gui.image_chips import BUBBLE_MAX_PX, CHIP_THUMB_PX
from app.store import Store
from tests.gui.test_images_window import install
from tests.support import REPO
from tests.support.desktop import desktop_env, xvfb

SCREENSHOT = REPO / "build" / "ci-artifacts" / "images-xcb.png"  # for a person to look at


def test_on_x11_a_pasted_image_is_sent_shown_again_after_a_restart_and_exported(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    from app.config import Paths

    model = install(Store(Paths(home)), tmp_path, "Sees Things", projector=True)
    export, result = tmp_path / "out" / "picture chat.md", tmp_path / "result.json"
    export.parent.mkdir()
    with xvfb() as display:
        done = subprocess.run(
            [sys.executable, "-m", "tests.support.images_session", model, str(export),
             str(result), str(SCREENSHOT)], env=desktop_env(display, home), cwd=REPO,
            capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    seen = json.loads(result.read_text(encoding="utf-8"))
    assert seen["platform"] == "xcb"
    assert seen["thumb"] == [CHIP_THUMB_PX, 25]  # 800x500 scaled into 40x40
    assert seen["sent"] == seen["reopened"] == [[BUBBLE_MAX_PX, 200]]
    assert seen["typed"] == "What is in this picture?"
    assert (seen["answer_status"], seen["media_tokens"], seen["banner"]) == ("complete", 16, "")
    markdown = export.read_text(encoding="utf-8")
    [link] = [line for line in markdown.splitlines() if line.startswith("![image 1](")]
    image = export.parent / link.removeprefix("![image 1](").removesuffix(")").replace(
        "%20", " ")
    assert image.parent.name == "picture chat-media" and image.read_bytes()[:4] == b"\x89PNG"
