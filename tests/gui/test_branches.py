"""Branches, export and import, presets and per-model load settings in the window, driven like
a user would (pytest-qt, offscreen Qt, the real Qwen2.5-Coder-0.5B on the shared test Runtime;
answers of a few tokens)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QTimer

from app.config import Paths
from app.gui import build_window
from app.gui.branch_switcher import BranchSwitcher
from app.gui.main_window import MainWindow
from app.presets import ModelLoad, model_load, presets
from app.runtime import Runtime
from backends.base import GenerationRequest, Message

LONG_WAIT_MS = 180_000


@pytest.fixture
def window(qtbot, runtime: Runtime, tmp_path: Path) -> Iterator[MainWindow]:
    w = build_window(home=Paths(tmp_path / "home"), runtime=runtime)
    w.settings.temperature = 0.0  # greedy: answers are reproducible
    w.settings.max_tokens = 6
    qtbot.addWidget(w)
    w.show()
    yield w
    w.controller.stop(wait=True)


def send(qtbot, w: MainWindow, text: str) -> list[Message]:
    """Send `text`; the messages the model is given for the answer."""
    w.chat.composer.setPlainText(text)
    qtbot.keyClick(w.chat.composer, Qt.Key.Key_Return)
    return list(sent_request(qtbot, w).messages)


def sent_request(qtbot, w: MainWindow) -> GenerationRequest:
    """The request of the answer being made, once the turn's thread has built it."""
    assert w.controller.task is not None
    qtbot.waitUntil(lambda: w.controller.turns.request is not None, timeout=LONG_WAIT_MS)
    request = w.controller.turns.request
    assert request is not None
    return request


def wait_idle(qtbot, w: MainWindow) -> None:
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=LONG_WAIT_MS)


def shown(w: MainWindow) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in w.chat.messages]


def switcher(w: MainWindow, index: int) -> BranchSwitcher | None:
    found = w.chat.messages[index].findChild(BranchSwitcher)
    return found if found is not None and not found.isHidden() else None


def as_sent(w: MainWindow) -> list[tuple[str, str]]:
    """The shown path in the history, as the model is given it (no streaming answer)."""
    return [(m.role, m.content) for m in w.history.messages(w.controller.conversation_id)
            if m.status != "streaming"]


def test_edit_and_regenerate_keep_versions_and_the_switcher_shows_the_path_the_model_saw(
        qtbot, window: MainWindow):
    sent = send(qtbot, window, "Say the letter A.")
    assert [(m.role, m.content) for m in sent] == [("user", "Say the letter A.")]
    wait_idle(qtbot, window)
    first_answer = window.chat.messages[1].text
    assert first_answer and switcher(window, 1) is None  # one version: no switcher

    qtbot.mouseClick(window.chat.regenerate, Qt.MouseButton.LeftButton)
    # the new answer is given the question only, not the answer it replaces
    assert [(m.role, m.content) for m in sent_request(qtbot, window).messages] == [
        ("user", "Say the letter A.")]
    wait_idle(qtbot, window)
    assert len(window.chat.messages) == 2
    assert switcher(window, 1) is not None and switcher(window, 1).label.text() == "2/2"

    qtbot.mouseClick(window.chat.edit, Qt.MouseButton.LeftButton)
    assert window.chat.composer.toPlainText() == "Say the letter A."
    assert window.chat.messages == []
    sent = send(qtbot, window, "Say the letter B.")
    assert [(m.role, m.content) for m in sent] == [("user", "Say the letter B.")]
    wait_idle(qtbot, window)
    assert shown(window)[0] == ("user", "Say the letter B.")
    assert switcher(window, 0).label.text() == "2/2"
    assert switcher(window, 1) is None  # B has one answer

    # back to A: its path comes back as it was, with its second answer shown
    qtbot.mouseClick(switcher(window, 0).previous, Qt.MouseButton.LeftButton)
    assert shown(window)[0] == ("user", "Say the letter A.")
    assert switcher(window, 0).label.text() == "1/2"
    assert switcher(window, 1).label.text() == "2/2"
    qtbot.mouseClick(switcher(window, 1).previous, Qt.MouseButton.LeftButton)
    assert shown(window) == [("user", "Say the letter A."), ("assistant", first_answer)]
    assert switcher(window, 1).label.text() == "1/2"

    # the model is given the shown path, and the new turn goes on from it
    sent = send(qtbot, window, "Now say C.")
    assert [(m.role, m.content) for m in sent] == [
        ("user", "Say the letter A."), ("assistant", first_answer), ("user", "Now say C.")]
    assert switcher(window, 0).previous.isEnabled() is False  # no switching while it streams
    wait_idle(qtbot, window)
    assert as_sent(window)[:3] == [(r, c) for r, c in shown(window)][:3]
    assert len(window.history.all_messages(window.controller.conversation_id)) == 7
    conv = window.controller.conversation_id
    window.new_chat()
    window.controller.open(conv)  # reopened: the same path and the same versions
    assert shown(window)[:2] == [("user", "Say the letter A."), ("assistant", first_answer)]
    assert switcher(window, 1).label.text() == "1/2"


def test_edit_under_an_earlier_question_branches_there_and_keeps_the_turns_after_it(
        qtbot, window: MainWindow):
    send(qtbot, window, "Say one.")
    wait_idle(qtbot, window)
    send(qtbot, window, "Say two.")
    wait_idle(qtbot, window)
    before = shown(window)
    assert switcher(window, 1) is None  # an answer with one version: no row under it
    qtbot.mouseClick(switcher(window, 0).edit, Qt.MouseButton.LeftButton)
    assert window.chat.composer.toPlainText() == "Say one." and window.chat.messages == []
    sent = send(qtbot, window, "Say three.")
    assert [(m.role, m.content) for m in sent] == [("user", "Say three.")]
    wait_idle(qtbot, window)
    assert [r for r, _ in shown(window)] == ["user", "assistant"]
    assert switcher(window, 0).label.text() == "2/2"
    qtbot.mouseClick(switcher(window, 0).previous, Qt.MouseButton.LeftButton)
    assert shown(window) == before  # the first question with both turns after it


def in_modal(qtbot, action: Callable[[], None]) -> None:
    """Run `action` once the modal dialog the next call opens is up (exec() blocks)."""
    QTimer.singleShot(100, action)


def test_ctrl_e_exports_and_the_json_imports_back_with_its_versions(
        qtbot, window: MainWindow, tmp_path: Path):
    send(qtbot, window, "Name a color.")
    wait_idle(qtbot, window)
    qtbot.mouseClick(window.chat.regenerate, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    original = shown(window)
    conv = window.controller.conversation_id

    qtbot.keyClick(window, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    dialog = window.export_dialog
    assert dialog is not None and dialog.isVisible() and dialog.this_one.isChecked()
    assert dialog.path.text().endswith("Name a color.md")
    dialog.format.setCurrentIndex(dialog.format.findData("json"))
    assert dialog.path.text().endswith("Name a color.json")
    out = tmp_path / "export" / "color.json"
    dialog.path.setText(str(out))
    qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    assert not dialog.isVisible() and dialog.written == out
    assert str(out) in window.statusBar().currentMessage()
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [c["title"] for c in data["conversations"]] == ["Name a color."]
    assert len(data["conversations"][0]["messages"]) == 3  # both answers

    qtbot.keyClick(window, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    md = tmp_path / "color.md"
    window.export_dialog.path.setText(str(md))
    qtbot.mouseClick(window.export_dialog.save_button, Qt.MouseButton.LeftButton)
    assert "### Ember (version 2 of 2)" in md.read_text(encoding="utf-8")
    window.new_chat()
    window.conversations.rename_current("Second")
    qtbot.keyClick(window, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    window.export_dialog.all.click()
    assert Path(window.export_dialog.path.text()).name == "conversations.md"
    window.export_dialog.path.setText(str(tmp_path / "conversations.md"))
    qtbot.mouseClick(window.export_dialog.save_button, Qt.MouseButton.LeftButton)
    everything = window.export_dialog.written.read_text(encoding="utf-8")
    assert "# Second" in everything and "# Name a color." in everything
    window.conversations.delete_current()

    window.import_file()  # the Import… action: Qt's file dialog
    chooser = window.import_dialog
    assert chooser is not None and chooser.isVisible()
    chooser.selectFile(str(out))
    chooser.accept()
    qtbot.waitUntil(lambda: window.controller.conversation_id != conv, timeout=5000)
    assert shown(window) == original
    assert switcher(window, 1).label.text() == "2/2"
    titles = [window.conversations.list.item(i).text()
              for i in range(window.conversations.list.count())]
    assert titles == ["Name a color.", "Name a color."]

    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"messages": [{"role": "user", "content": "hi"}]}', encoding="utf-8")
    assert window.import_from(str(foreign)) == []
    assert "Nothing was imported" in window.import_error.text()
    assert "is not an Ember conversations export" in window.import_error.text()
    assert len(window.history.conversations()) == 2


def test_a_preset_made_in_settings_and_chosen_for_a_chat_sets_its_prompt_and_sampling(
        qtbot, window: MainWindow, tmp_path: Path):
    def make_preset() -> None:
        box = window.settings_dialog.presets
        box.new()
        box.name.setText("Pirate")
        box.system_prompt.setPlainText("You are a pirate. Answer in one word.")
        box.temperature.setValue(0.0)
        box.top_k.setValue(5)
        box.max_tokens.setValue(3)
        qtbot.mouseClick(box.save_button, Qt.MouseButton.LeftButton)
        window.settings_dialog.reject()

    in_modal(qtbot, make_preset)
    window.open_settings()
    assert presets(window.home)["Pirate"].max_tokens == 3
    picker = window.preset_picker
    assert [picker.itemText(i) for i in range(picker.count())] == [
        "No preset (Settings)", "Pirate"]

    send(qtbot, window, "Hello.")  # a chat on the app's settings
    wait_idle(qtbot, window)
    plain = window.controller.conversation_id
    window.new_chat()
    picker.setCurrentIndex(picker.findData("Pirate"))
    picker.activated.emit(picker.currentIndex())
    sent = send(qtbot, window, "Hello.")
    request = sent_request(qtbot, window)
    assert sent[0] == Message("system", "You are a pirate. Answer in one word.")
    assert (request.sampling.max_tokens, request.sampling.top_k,
            request.sampling.temperature) == (3, 5, 0.0)
    wait_idle(qtbot, window)
    assert window.chat.messages[-1].stats.text().startswith(
        ("1 token ", "2 tokens", "3 tokens"))
    pirate = window.controller.conversation_id
    assert window.history.get(pirate).preset == "Pirate"
    window._open_conversation(plain)
    assert picker.currentData() is None
    window._open_conversation(pirate)
    assert picker.currentText() == "Pirate"


def test_a_models_load_settings_are_remembered_and_used_when_it_loads(
        qtbot, window: MainWindow, runtime: Runtime, qwen):
    def set_load() -> None:
        box = window.settings_dialog.model_load
        assert box is not None and box.ref == qwen.ref
        box.context.setValue(2048)
        box.kv_cache.setCurrentIndex(box.kv_cache.findData("q8_0"))
        window.settings_dialog.accept()

    in_modal(qtbot, set_load)
    window.open_settings()
    try:
        assert model_load(qwen.ref, window.home) == ModelLoad(2048, -1, "q8_0")
        assert not runtime.loaded()  # unloaded: the next answer loads it anew
        send(qtbot, window, "Say OK.")
        wait_idle(qtbot, window)
        plan = runtime.loaded()[0].plan
        assert (plan.context, plan.kv_cache) == (2048, "q8_0")
        assert "KV cache q8_0 (set for this model)" in plan.reason
        assert window.chat.meter.maximum() == 2048
    finally:
        runtime.load(qwen.ref, context=4096, kv_cache="f16")  # the shared Runtime as it was


def test_a_preset_is_changed_and_deleted_in_settings_and_its_chats_fall_back(
        qtbot, window: MainWindow):
    def make() -> None:
        box = window.settings_dialog.presets
        box.name.setText("Terse")
        box.max_tokens.setValue(20)
        qtbot.mouseClick(box.save_button, Qt.MouseButton.LeftButton)
        window.settings_dialog.reject()

    in_modal(qtbot, make)
    window.open_settings()
    window.new_chat()
    picker = window.preset_picker
    picker.setCurrentIndex(picker.findData("Terse"))
    picker.activated.emit(picker.currentIndex())
    assert window.controller.choices.sampling().max_tokens == 20

    def change_then_delete() -> None:
        box = window.settings_dialog.presets
        box.list.setCurrentRow(0)
        assert box.name.text() == "Terse" and box.max_tokens.value() == 20
        box.max_tokens.setValue(30)
        qtbot.mouseClick(box.save_button, Qt.MouseButton.LeftButton)
        assert window.controller.choices.sampling().max_tokens == 30  # its chats follow the change
        box.name.setText("")
        qtbot.mouseClick(box.save_button, Qt.MouseButton.LeftButton)
        assert "a preset needs a name" in box.error.text()
        qtbot.mouseClick(box.delete_button, Qt.MouseButton.LeftButton)
        assert box.list.count() == 0
        window.settings_dialog.reject()

    in_modal(qtbot, change_then_delete)
    window.open_settings()
    assert presets(window.home) == {}
    assert [picker.itemText(i) for i in range(picker.count())] == ["No preset (Settings)"]
    # the chat keeps the name, and takes the app's settings while no such preset exists
    assert window.history.get(window.controller.conversation_id).preset == "Terse"
    assert window.controller.choices.sampling().max_tokens == window.settings.max_tokens == 6
