"""Images in the chat window (issue 42), driven as a user would: Ctrl+V of an image in the
message box, a drop of an image file and the paperclip's dialog make chips with a thumbnail;
the context meter counts them by estimate; a sent question's bubble holds the image, again
after a restart (from history.db and its media folder). A model that cannot see says so on
the banner, naming the models that can: the real Qwen2.5-Coder-0.5B (text only) on the
shared test Runtime. pytest-qt, offscreen Qt.

The "sees" side is the tiny Gemma 3 vision model (random weights, tests/support/tiny_vision.py)
imported with its projector: its answer is noise, but a real answer through llama.cpp's mtmd,
with its image tokens counted."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication, QImage
from PySide6.QtWidgets import QApplication

from app.chat.attachments import IMAGE_TOKENS_ESTIMATE
from app.config import Paths
from app.gui import build_window
from app.gui.chat_view import MessageWidget
from app.gui.image_chips import BUBBLE_MAX_PX, CHIP_THUMB_PX
from app.gui.main_window import MainWindow
from app.runtime import Runtime
from app.store import InstalledModel, Store
from tests.support.tiny_gguf import write_tiny_gguf
from tests.support.tiny_vision import write_tiny_gemma3_vision

WAIT_MS = 300_000


def png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


def install(store: Store, tmp: Path, name: str, projector: bool) -> str:
    """A text model (a tiny GGUF), or the tiny Gemma 3 vision model imported with its
    projector as `ember import --mmproj` does (tests/support/tiny_vision.py)."""
    if projector:
        tiny = write_tiny_gemma3_vision(tmp / name)
        return store.import_gguf(tiny.model, projector=tiny.projector).ref
    # a chat template, so the window's picker lists it
    return store.import_gguf(write_tiny_gguf(
        tmp / f"{name}.gguf", name=name,
        chat_template="{% for m in messages %}{{ m.content }}{% endfor %}")).ref


@pytest.fixture
def home(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "home")


def open_window(qtbot, home: Paths, runtime: Runtime, model: str) -> MainWindow:
    w = build_window(home=home, runtime=runtime)
    qtbot.addWidget(w)
    w.show()
    w.controller.model = model
    return w


def close(w: MainWindow) -> None:
    w.controller.stop(wait=True)
    w.close()
    w.library.close()


@pytest.fixture
def seeing(tmp_path: Path, home: Paths) -> Iterator[tuple[Runtime, str]]:
    home.home.mkdir(parents=True)
    store = Store(home)
    ref = install(store, tmp_path, "Sees Things", projector=True)
    with Runtime(store=store) as rt:
        yield rt, ref


def paste(qtbot, w: MainWindow, image: QImage) -> None:
    QGuiApplication.clipboard().setImage(image)
    w.chat.composer.setFocus()
    qtbot.keyClick(w.chat.composer, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)


def test_a_pasted_image_is_a_chip_then_the_sent_bubble_and_again_after_a_restart(
        qtbot, seeing: tuple[Runtime, str], home: Paths, tmp_path: Path):
    runtime, model = seeing
    w = open_window(qtbot, home, runtime, model)
    try:
        shot = QImage(640, 400, QImage.Format.Format_RGB32)
        shot.fill(Qt.GlobalColor.red)
        paste(qtbot, w, shot)
        qtbot.waitUntil(lambda: len(w.chat.image_chips.chips) == 1, timeout=10_000)
        assert w.chat.composer.toPlainText() == ""  # the image is not pasted as text
        chip = w.chat.image_chips.chips[0]
        thumb = chip.thumb.pixmap()
        assert not thumb.isNull() and (thumb.width(), thumb.height()) == (CHIP_THUMB_PX, 25)
        assert QImage(thumb.toImage()).pixelColor(5, 5).red() == 255
        assert chip.label.text() == "pasted image · PNG 640x400"
        assert w.chat.meter.format() == f"context {IMAGE_TOKENS_ESTIMATE:,} tokens"
        # a dropped image file is a second chip (not a document)
        blue = tmp_path / "blue.png"
        blue.write_bytes(png((0, 0, 255), (100, 50)))
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(blue))])
        target = w.chat.composer.viewport()
        QApplication.sendEvent(target, QDragEnterEvent(
            QPoint(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier))
        QApplication.sendEvent(target, QDropEvent(
            QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier))
        assert [c.attachment.name for c in w.chat.image_chips.chips] == ["pasted image",
                                                                         "blue.png"]
        assert w.chat.chips.names() == []  # no document was attached
        # sent: the bubble holds both, at most BUBBLE_MAX_PX wide; the chips are gone
        w.chat.composer.setPlainText("What is in these pictures?")
        qtbot.keyClick(w.chat.composer, Qt.Key.Key_Return)
        question = next(m for m in w.chat.messages if m.role == "user")
        assert isinstance(question, MessageWidget)
        sizes = [(label.pixmap().width(), label.pixmap().height())
                 for label in question.images.labels]
        assert sizes == [(BUBBLE_MAX_PX, 200), (100, 50)]
        assert w.chat.image_chips.chips == [] and w.chat.image_chips.isHidden()
        qtbot.waitUntil(lambda: not w.controller.busy, timeout=WAIT_MS)
        request = w.controller.turns.request
        assert request is not None and len(request.messages[-1].media) == 2
        answer = w.chat.messages[-1]
        assert isinstance(answer, MessageWidget) and answer.role == "assistant"
        assert w.chat.banner_message() == "", w.chat.banner_message()
        stored = w.history.messages(w.controller.conversation_id)[-1]
        assert stored.status == "complete"
        # each image costs the tiny model 16 tokens (mtmd's count), in the prompt's count
        assert stored.stats["media_tokens"] == 32
        assert stored.stats["prompt_tokens"] > 32
        used = stored.stats["prompt_tokens"] + stored.stats["completion_tokens"]
        assert w.chat.meter.value() == used
        # Regenerate: the request is rebuilt from history, images included
        w.chat.regenerate.click()
        qtbot.waitUntil(lambda: not w.controller.busy, timeout=WAIT_MS)
        assert len(w.controller.turns.request.messages[-1].media) == 2
        # an edit sent without new images keeps the question's, in its bubble too
        w.chat.edit.click()
        assert w.chat.composer.toPlainText() == "What is in these pictures?"
        w.chat.composer.setPlainText("And these?")
        qtbot.keyClick(w.chat.composer, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: not w.controller.busy, timeout=WAIT_MS)
        edited = next(m for m in w.chat.messages if m.role == "user")
        assert isinstance(edited, MessageWidget) and edited.text == "And these?"
        assert [label.pixmap().width() for label in edited.images.labels] == [
            BUBBLE_MAX_PX, 100]
        assert len(w.controller.turns.request.messages[-1].media) == 2
        w.controller.switch_to(w.history.all_messages(w.controller.conversation_id)[0].id)
        conv = w.controller.conversation_id
        assert conv is not None
    finally:
        close(w)
    # a restart: the question's bubble shows its images again, read from the media folder
    again = open_window(qtbot, home, runtime, model)
    try:
        again.controller.open(conv)
        question = next(m for m in again.chat.messages if m.role == "user")
        assert isinstance(question, MessageWidget)
        assert question.text == "What is in these pictures?"
        assert [label.pixmap().width() for label in question.images.labels] == [
            BUBBLE_MAX_PX, 100]
        pixel = question.images.labels[1].pixmap().toImage().pixelColor(10, 10)
        assert (pixel.red(), pixel.blue()) == (0, 255)
    finally:
        close(again)


def test_an_image_for_a_model_that_cannot_see_says_so_and_names_those_that_can(
        qtbot, runtime: Runtime, qwen: InstalledModel, home: Paths, tmp_path: Path):
    w = open_window(qtbot, home, runtime, qwen.ref)
    try:
        photo = tmp_path / "photo.png"
        photo.write_bytes(png((0, 200, 0), (64, 64)))
        dialog = w.chat.choose_files()
        assert any("*.png" in f and f.startswith("Images") for f in dialog.nameFilters())
        dialog.filesSelected.emit([str(photo)])
        dialog.close()
        seeing = [m.ref for m in runtime.store.list() if m.projector is not None]
        named = (f"Installed models that can: {', '.join(seeing)}." if seeing else
                 "No installed model can: download a vision model")
        assert w.chat.banner_message().startswith(
            f"{qwen.ref} cannot see images (it has no vision projector). {named}")
        assert w.chat.image_chips.chips == []
        # a paste of something that is not an image stays text
        mime = QMimeData()
        mime.setText("just words")
        w.chat.composer.insertFromMimeData(mime)
        assert w.chat.composer.toPlainText() == "just words"
    finally:
        close(w)


def test_the_banner_offers_to_switch_to_an_installed_model_that_sees(
        qtbot, seeing: tuple[Runtime, str], home: Paths, tmp_path: Path):
    runtime, vision = seeing
    words = install(runtime.store, tmp_path, "Words Only", projector=False)
    w = open_window(qtbot, home, runtime, vision)
    try:
        w.choose_model(words)  # the chat's model cannot see
        assert w.controller.model == words
        photo = tmp_path / "photo.png"
        photo.write_bytes(png((0, 200, 0), (64, 64)))
        w.controller.attach_files([photo])
        assert w.chat.banner_message() == (
            f"{words} cannot see images (it has no vision projector). Installed models "
            f"that can: {vision}.")
        button = w.chat.banner_buttons["Switch to a model that sees"]
        assert button.isVisible() and w.chat.image_chips.chips == []
        button.click()
        assert w.controller.model == vision and w.model_picker.currentData() == vision
        assert w.chat.banner_message() == ""
        w.controller.attach_files([photo])  # now it is taken
        assert [c.attachment.name for c in w.chat.image_chips.chips] == ["photo.png"]
    finally:
        close(w)
