"""The window's frame, driven like a user would (pytest-qt, offscreen Qt, the real
Qwen2.5-Coder models): the rail of pages, the Server page, the Ctrl+K model switcher with fit
badges, Ctrl+F find, the shortcut list, the status bar after an answer, and the context meter
while the first answer streams."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QLineEdit

from app.chat.events import TextDelta
from app.config import Paths
from app.fit import fits_for
from app.gui import build_window
from app.gui.main_window import MainWindow
from app.gui.nav_rail import PAGES
from app.gui.settings_dialog import SettingsDialog
from app.gui.shortcuts import ALL, ShortcutsDialog
from app.registry import load_registry
from app.runtime import Runtime
from app.store import InstalledModel, Store

LONG_WAIT_MS = 180_000
CTRL = Qt.KeyboardModifier.ControlModifier


def open_window(qtbot, runtime: Runtime, home: Path) -> MainWindow:
    w = build_window(home=Paths(home), runtime=runtime)
    w.settings.temperature = 0.0  # greedy: answers are reproducible
    w.settings.max_tokens = 8
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def window(qtbot, runtime: Runtime, tmp_path: Path) -> Iterator[MainWindow]:
    w = open_window(qtbot, runtime, tmp_path / "home")
    yield w
    w.controller.stop(wait=True)


def send(qtbot, w: MainWindow, text: str) -> None:
    w.chat.composer.setPlainText(text)
    qtbot.keyClick(w.chat.composer, Qt.Key.Key_Return)


def wait_idle(qtbot, w: MainWindow) -> None:
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=LONG_WAIT_MS)


def test_the_rail_shows_each_page_and_opens_settings_as_a_dialog(qtbot, window: MainWindow):
    rail = window.rail
    assert [rail.buttons[p.name].text() for p in PAGES] == ["Chat", "Models", "Machine",
                                                          "Server"]
    assert all(not b.icon().isNull() for b in rail.buttons.values())  # assets/icons drawn
    assert rail.current() == "chat" and window.conversations.isVisible()
    expected = {"models": window.hub, "machine": window.machine_page,
                "server": window.server_page, "chat": window.chat}
    for name, page in expected.items():
        qtbot.mouseClick(rail.buttons[name], Qt.MouseButton.LeftButton)
        assert window.pages.currentWidget() is page and rail.current() == name
        # the conversation list belongs to the Chat page
        assert window.conversations.isVisible() is (name == "chat")
    qtbot.keyClick(window, Qt.Key.Key_3, CTRL)
    assert window.pages.currentWidget() is window.machine_page and rail.current() == "machine"

    seen: list[bool] = []

    def close_settings() -> None:
        dialog = window.settings_dialog
        seen.append(isinstance(dialog, SettingsDialog) and dialog.isVisible())
        dialog.reject()

    QTimer.singleShot(100, close_settings)
    qtbot.mouseClick(rail.buttons["settings"], Qt.MouseButton.LeftButton)
    assert seen == [True]
    assert window.pages.currentWidget() is window.machine_page  # a dialog: the page stays


def lightest(icon) -> int:
    image = icon.pixmap(48, 48).toImage()
    return max(image.pixelColor(x, y).lightness() for x in range(48) for y in range(48)
               if image.pixelColor(x, y).alpha() > 200)


def test_the_rail_icons_follow_the_theme(qtbot, window: MainWindow):
    chat = window.rail.buttons["chat"]
    window.settings_error = ""
    for theme in ("light", "dark"):
        settings = replace(window.settings, theme=theme)
        window.apply_settings(settings, "")
        shade = lightest(chat.icon())
        # dark strokes on the light theme, light strokes on the dark one
        assert shade < 100 if theme == "light" else shade > 180
    window.apply_settings(replace(window.settings, theme="light"), "")


def test_the_shortcut_list_shows_every_key_the_window_binds(qtbot, window: MainWindow):
    qtbot.keyClick(window, Qt.Key.Key_F1)
    dialog = window.shortcuts_dialog
    assert isinstance(dialog, ShortcutsDialog) and dialog.isVisible()
    table = dialog.table.text()
    for key in ("Ctrl+K", "Ctrl+N", "Ctrl+F", "Ctrl+E", "Esc"):
        assert f"<b>{key}</b>" in table
    assert len(ALL) == table.count("<tr>")
    assert "Ctrl+K" in window.model_picker.toolTip()
    dialog.reject()


def test_ctrl_k_filters_the_models_with_their_fit_badges_and_picks_one(
        qtbot, window: MainWindow, qwen: InstalledModel, qwen15: InstalledModel):
    window.refresh_models(select=qwen.ref)  # qwen15 may have been pulled after the window
    assert window.model_picker.currentData() == qwen.ref
    fit = next(f for f in fits_for(load_registry().get(qwen15.id), window.runtime.hardware)
               if f.quant == qwen15.quant)
    index = window.model_picker.findData(qwen15.ref)
    assert window.model_picker.itemText(index).endswith(fit.label)  # the fit badge
    assert not window.model_picker.itemIcon(index).isNull()
    # the fit's explanation, then the backend that runs it and why
    choice = window.runtime.choose(qwen15)
    assert window.model_picker.itemData(index, Qt.ItemDataRole.ToolTipRole) == (
        f"{fit.explain()}\n{choice.name}: {choice.reason}")

    qtbot.keyClick(window.chat.composer, Qt.Key.Key_K, CTRL)
    switcher = window.switcher
    assert switcher is not None and switcher.isVisible()
    assert QApplication.focusWidget() is switcher.filter
    assert {qwen.ref, qwen15.ref} <= set(switcher.visible_refs())
    qtbot.keyClicks(switcher.filter, f"coder 1.5b {qwen15.quant.lower()}")
    assert switcher.visible_refs() == [qwen15.ref]
    qtbot.keyClicks(switcher.filter, " nothing-like-this")
    assert switcher.visible_refs() == [] and switcher.empty.isVisible()
    switcher.filter.setText(f"0.5B {qwen.quant}")
    qtbot.keyClick(switcher.filter, Qt.Key.Key_Return)
    assert not switcher.isVisible()
    assert window.model_picker.currentData() == qwen.ref == window.controller.model

    qtbot.keyClick(window.chat.composer, Qt.Key.Key_K, CTRL)
    switcher = window.switcher
    switcher.filter.setText("qwen2.5-coder")
    rows = switcher.visible_refs()
    at = rows.index(qwen.ref)  # the chat's model is the current row
    assert switcher.list.currentItem().data(Qt.ItemDataRole.UserRole) == qwen.ref
    # Up and Down move in the list while the filter keeps the keyboard
    down = at < len(rows) - 1
    qtbot.keyClick(switcher.filter, Qt.Key.Key_Down if down else Qt.Key.Key_Up)
    assert QApplication.focusWidget() is switcher.filter
    qtbot.keyClick(switcher.filter, Qt.Key.Key_Return)
    assert window.controller.model == rows[at + 1 if down else at - 1]


def test_ctrl_f_highlights_every_match_and_steps_through_them(qtbot, window: MainWindow):
    conv = window.history.create(title="Fruit")
    for role, text in (("user", "Name an apple variety."),
                       ("assistant", "Gala is an **apple**; so is Fuji."),
                       ("user", "And a pear?"),
                       ("assistant", "Conference. Not an Apple at all.")):
        window.history.add_message(conv.id, role, text)
    window.conversations.refresh(select=conv.id)
    window._open_conversation(conv.id)
    bodies = [m.body for m in window.chat.messages]

    qtbot.keyClick(window.chat.composer, Qt.Key.Key_F, CTRL)
    bar = window.chat.find_bar
    assert bar.isVisible() and QApplication.focusWidget() is bar.field
    qtbot.keyClicks(bar.field, "apple")
    assert bar.count.text() == "1 of 3"  # case does not matter, as in a browser
    assert [len(b.extraSelections()) for b in bodies] == [1, 1, 0, 1]
    qtbot.keyClick(bar.field, Qt.Key.Key_Return)
    assert bar.count.text() == "2 of 3"
    current = bodies[1].extraSelections()[0]
    assert current.cursor.selectedText() == "apple"
    assert current.format.background().color().name() == "#f5a25d"  # the current match
    qtbot.keyClick(bar.field, Qt.Key.Key_Return)
    qtbot.keyClick(bar.field, Qt.Key.Key_Return)
    assert bar.count.text() == "1 of 3"  # round again
    qtbot.keyClick(bar.field, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert bar.count.text() == "3 of 3"
    assert bodies[3].extraSelections()[0].cursor.selectedText() == "Apple"
    bar.field.setText("durian")
    assert bar.count.text() == "no match"
    assert all(not b.extraSelections() for b in bodies)
    bar.field.setText("pear")
    qtbot.keyClick(bar.field, Qt.Key.Key_Escape)
    assert not bar.isVisible() and all(not b.extraSelections() for b in bodies)
    assert not window.controller.busy  # Esc closed the bar; nothing else happened


def test_the_server_page_starts_the_api_with_its_address_and_key(qtbot, window: MainWindow):
    page = window.server_page
    qtbot.mouseClick(window.rail.buttons["server"], Qt.MouseButton.LeftButton)
    assert page.button.text() == "Start" and not page.key.isEnabled()
    qtbot.mouseClick(page.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.server is not None and page.url.field.text() != "",
                    timeout=30_000)
    url, key = window.server.url, window.server.key
    assert page.url.field.text() == url and page.openai.field.text() == f"{url}/v1"
    assert page.ollama.field.text() == f"{url}/api" and page.button.text() == "Stop"
    assert page.key.field.text() == key
    assert page.key.field.echoMode() == QLineEdit.EchoMode.Password  # shown on Show only
    qtbot.mouseClick(page.key.copy, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == key
    example = page.example.toPlainText()
    assert url in example and window.controller.model in example
    assert key not in example  # out of sight, as in the masked field
    assert key not in window.server_label.text()  # the status bar shows the address only
    reply = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert reply.status_code == 200
    qtbot.mouseClick(page.button, Qt.MouseButton.LeftButton)
    assert window.server is None and page.button.text() == "Start"
    assert page.url.field.text() == "" and not page.key.isEnabled()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health")


def test_the_status_bar_shows_the_loaded_model_its_memory_and_the_last_speed(
        qtbot, window: MainWindow, qwen: InstalledModel):
    send(qtbot, window, "Count from 1 to 20, separated by commas.")  # 8 tokens
    wait_idle(qtbot, window)
    stats = window.history.messages(window.controller.conversation_id)[-1].stats
    line = window.status_line
    assert stats["completion_tokens"] == 8 and stats["decode_tokens_per_s"] > 0
    assert line.speed.text() == f"Last answer: {stats['decode_tokens_per_s']:.1f} tokens/s"
    qtbot.waitUntil(lambda: qwen.ref in line.model.text(), timeout=10_000)
    loaded = next(lm for lm in window.runtime.loaded() if lm.model.ref == qwen.ref)
    # the shared Runtime may hold another model beside it, from an earlier test
    assert line.model.text().startswith("Loaded: ")
    assert f"{qwen.ref} ({loaded.backend})" in line.model.text()
    # the worker's resident memory: a 0.5B Q8_0 model holds hundreds of MB
    amount, unit = line.memory.text().removeprefix("Memory: ").split()
    assert 100e6 < float(amount) * {"MB": 1e6, "GB": 1e9}[unit] < 4e9
    window.new_chat()
    assert line.speed.text() == "" and not line.speed.isVisible()  # no answer in it yet


def test_the_context_meter_counts_while_the_first_answer_streams(
        qtbot, tmp_path: Path, store: Store, qwen: InstalledModel):
    """As a new user sees it: the model not loaded yet, the first answer of the session."""
    with Runtime(store=store) as fresh:
        w = open_window(qtbot, fresh, tmp_path / "home")
        w.settings.max_tokens = 12
        w.refresh_models(select=qwen.ref)
        meter = w.chat.meter
        assert meter.text() == "context: known once the model loads"  # not "0 / 1"
        seen: list[tuple[int, int, str]] = []
        send(qtbot, w, "Count from one to ten in words.")
        w.controller.task.happened.connect(
            lambda e: seen.append((meter.value(), meter.maximum(), meter.text()))
            if isinstance(e, TextDelta) else None)
        wait_idle(qtbot, w)
        stats = w.history.messages(w.controller.conversation_id)[-1].stats
        context = fresh.loaded()[0].plan.context
        assert len(seen) >= 3
        # from the first token: the prompt's tokens (counted by the model) plus those streamed
        assert seen[0][:2] == (stats["prompt_tokens"] + 1, context)
        assert seen[0][2] == f"context {stats['prompt_tokens'] + 1:,} / {context:,} tokens"
        values = [v for v, _, _ in seen]
        assert values == sorted(values) and values[-1] <= stats["prompt_tokens"] + \
            stats["completion_tokens"]
        assert meter.value() == stats["prompt_tokens"] + stats["completion_tokens"]
        assert meter.maximum() == context
        w.new_chat()  # a new chat on the loaded model: its size is known at once
        assert meter.text() == f"context 0 / {context:,} tokens"
        w.close()
