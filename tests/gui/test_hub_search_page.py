"""The Models page's Hugging Face tab against the local server speaking the Hub's protocol:
search results with downloads, likes, date, licence and gating; a repo opened to its
quantizations with size and fit badge (headers only); a download that ends installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.config import Paths
from app.gui.catalog_page import HubWidget
from app.store import Store
from tests.support.hub_repos import add_gguf_repo
from tests.support.hub_server import start_hub, use_hub
from tests.support.machines import desktop

REPO = "someone/Tiny-Chat-GGUF"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Paths):
    server_hub, server = start_hub()
    use_hub(monkeypatch, server_hub.url, tmp_path / "hf-cache")
    files = add_gguf_repo(server_hub, tmp_path, REPO, ["Q4_0", "Q8_0", "F16"],
                          weights=1_500_000, license="apache-2.0", downloads=4321, likes=12,
                          last_modified="2025-05-04T03:02:01.000Z")
    server_hub.repo("meta/Gated-Chat-GGUF", tags=("gguf",), gated="manual", downloads=10,
                    license="llama3.2")
    yield {"hub": server_hub, "files": files, "store": Store(isolated_home)}
    server.shutdown()


def test_search_open_a_repo_and_download_a_quantization(qtbot, hub):
    page = HubWidget(hub["store"], desktop())
    qtbot.addWidget(page)
    panel = page.hub_search
    panel.query.setText("chat")
    panel.format.setCurrentText("GGUF")
    qtbot.mouseClick(panel.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.tree.topLevelItemCount() == 2, timeout=20_000)
    rows = [panel.tree.topLevelItem(i) for i in range(2)]
    assert [[r.text(c) for c in (0, 2, 3, 4, 5)] for r in rows] == [
        [REPO, "4.3k", "12", "2025-05-04", "apache-2.0"],
        ["meta/Gated-Chat-GGUF", "10", "0", "2025-01-01", "llama3.2 · gated"]]
    assert "2 repositories" in panel.status.text()
    # opening a repo reads its files' headers on a task and lists the quantizations
    assert hub["hub"].served_bytes() == 0
    rows[0].setExpanded(True)
    qtbot.waitUntil(lambda: len(panel.quant_rows(REPO)) == 3, timeout=20_000)
    quants = {r.text(0): r for r in panel.quant_rows(REPO)}
    assert set(quants) == {"Q4_0", "Q8_0", "★ F16"}  # a roomy desktop: the best quality
    for row in quants.values():
        assert row.text(6) == "CPU" and "GB weights" in row.text(7) and "tok/s" in row.text(8)
        assert row.text(1).endswith("MB")
    total = sum(len(d) for d in hub["files"].values())
    assert hub["hub"].served_bytes() < total / 2  # headers, not weights
    # Download goes through the page's download rows, as a registry model's does
    installed = []
    page.installed.connect(installed.append)
    button = panel.tree.itemWidget(quants["Q8_0"], 9)
    assert button.text() == "Download"
    assert panel.tree.header().visualIndex(9) == 2  # right after the size, on screen
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(installed), timeout=30_000)
    row = page.rows[f"hf.co/{REPO}:Q8_0"]
    assert row.detail.text() == "installed and verified (SHA-256)"
    model = hub["store"].get("someone-tiny-chat-gguf:Q8_0")
    assert model.path.read_bytes() == hub["files"]["Tiny-Chat-Q8_0.gguf"]
    # the installed quantization now offers to be used rather than downloaded
    assert button.text() == "Use"
    assert panel.tree.itemWidget(quants["Q4_0"], 9).text() == "Download"


def test_a_repo_that_cannot_be_listed_says_why_in_its_row(qtbot, hub):
    page = HubWidget(hub["store"], desktop())
    qtbot.addWidget(page)
    panel = page.hub_search
    panel.query.setText("gated")
    panel.search()
    qtbot.waitUntil(lambda: panel.tree.topLevelItemCount() == 1, timeout=20_000)
    item = panel.tree.topLevelItem(0)
    item.setExpanded(True)  # a repo with no files: the Hub lists nothing Ember runs
    qtbot.waitUntil(lambda: item.child(0) is not None
                    and "reading" not in item.child(0).text(0), timeout=20_000)
    assert item.child(0).text(0) == "no GGUF, MLX or safetensors model Ember can run"
