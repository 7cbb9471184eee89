"""First run from a double-click: an empty data folder opens on "Your machine", one button
downloads the recommended model (the real Qwen2.5-Coder 0.5B GGUF, served by a local hub) with
its progress shown right there, and the window goes to a chat on it that answers."""

from __future__ import annotations

import yaml
from PySide6.QtCore import Qt

from app.gui import build_window
from app.resources import registry_file
from app.runtime import Runtime
from app.store import InstalledModel, Store
from tests.support.hub_server import start_hub
from tests.support.machines import desktop
from tests.support.models import QWEN

HUB_REPO = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
LONG_WAIT_MS = 180_000


def registry_of_qwen_on(hub_url_repo: str, tmp_path, monkeypatch) -> str:
    """models.yaml's own entry for the default model, its GGUF served by the local hub."""
    spec = next(m for m in yaml.safe_load(registry_file().read_text())["models"]
                if m["id"] == QWEN)
    spec["variants"] = [v for v in spec["variants"] if v["format"] == "gguf"]
    [variant] = spec["variants"]
    variant["sources"] = [{"kind": "hf", "repo": hub_url_repo, "file": variant["file"]}]
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": [spec]}))
    monkeypatch.setenv("EMBER_REGISTRY", str(tmp_path / "models.yaml"))
    return f"{QWEN}:{variant['quant']}"


def test_first_run_downloads_the_recommended_model_from_your_machine_and_chats(
        qtbot, qwen: InstalledModel, tmp_path, monkeypatch, isolated_home):
    fake, server = start_hub()
    # about 5 s at 100 MB/s: long enough to watch the bar move
    fake.add(HUB_REPO, qwen.path.name, qwen.path.read_bytes(), bytes_per_s=100_000_000)
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    ref = registry_of_qwen_on(HUB_REPO, tmp_path, monkeypatch)
    try:
        with Runtime(store=Store(isolated_home), hardware=desktop()) as rt:
            w = build_window(home=isolated_home, runtime=rt)
            w.settings.temperature, w.settings.max_tokens = 0.0, 16
            qtbot.addWidget(w)
            w.show()
            assert w.pages.currentWidget() is w.machine_page
            start = w.machine_panel.quick_start
            assert start is not None and start.ref == ref
            assert start.button.text() == "Download Qwen2.5-Coder 0.5B Instruct and start chatting"
            qtbot.mouseClick(start.button, Qt.MouseButton.LeftButton)
            qtbot.waitUntil(lambda: 0 < start.bar.value() < 1000, timeout=60_000)
            assert start.bar.isVisible() and " / " in start.detail.text()  # bytes of total
            assert w.pages.currentWidget() is w.machine_page  # the progress shows here
            assert not start.button.isEnabled()
            qtbot.waitUntil(lambda: w.pages.currentWidget() is w.chat, timeout=LONG_WAIT_MS)
            assert w.model_picker.currentData() == ref == w.controller.model
            with open(Store(isolated_home).get(QWEN).path, "rb") as f:
                assert f.read(4) == b"GGUF"
            assert w.machine_panel.quick_start is None  # a chat model is installed now
            w.chat.composer.setPlainText("What is 2+2? Answer with a number.")
            qtbot.keyClick(w.chat.composer, Qt.Key.Key_Return)
            qtbot.waitUntil(lambda: not w.controller.busy, timeout=LONG_WAIT_MS)
            assert "4" in w.chat.messages[-1].text
            [conv] = w.history.conversations()
            assert w.history.get(conv.id).model == ref
    finally:
        server.shutdown()


def test_a_failed_first_download_says_why_and_offers_to_try_again(
        qtbot, tmp_path, monkeypatch, isolated_home):
    fake, server = start_hub()  # the hub has no such file: every source answers 404
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    registry_of_qwen_on(HUB_REPO, tmp_path, monkeypatch)
    try:
        with Runtime(store=Store(isolated_home), hardware=desktop()) as rt:
            w = build_window(home=isolated_home, runtime=rt)
            qtbot.addWidget(w)
            start = w.machine_panel.quick_start
            assert start is not None
            qtbot.mouseClick(start.button, Qt.MouseButton.LeftButton)
            qtbot.waitUntil(start.button.isEnabled, timeout=60_000)
            assert start.button.text() == "Try the download again"
            assert start.detail.text() and w.pages.currentWidget() is w.machine_page
            asked = len(fake.requests)
            qtbot.mouseClick(start.button, Qt.MouseButton.LeftButton)  # tries again, for real
            qtbot.waitUntil(lambda: start.button.isEnabled() and len(fake.requests) > asked,
                            timeout=60_000)
            assert Store(isolated_home).list() == []
    finally:
        server.shutdown()
