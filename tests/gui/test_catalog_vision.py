"""The Models page marks the registry models that see: "· vision" beside the name (found by
the page's search), and each GGUF row's size says the projector comes with it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from app.config import Paths
from app.gui.catalog_page import HubWidget
from app.store import Store
from tests.support.machines import desktop


def top_row(hub: HubWidget, spec_id: str):
    return next(hub.tree.topLevelItem(i) for i in range(hub.tree.topLevelItemCount())
                if hub.tree.topLevelItem(i).data(0, Qt.ItemDataRole.UserRole) == spec_id)


def test_the_models_page_marks_the_models_that_see(qtbot, tmp_path: Path):
    hub = HubWidget(Store(Paths(tmp_path)), desktop())
    qtbot.addWidget(hub)
    assert top_row(hub, "gemma-3-4b-it").text(0) == "Gemma 3 4B IT · vision"
    assert top_row(hub, "gemma-3-1b-it").text(0) == "Gemma 3 1B IT"
    q4 = next(r for r in hub.variant_rows("gemma-3-4b-it") if r.text(1) == "Q4_K_M")
    assert "vision projector mmproj-model-f16.gguf" in q4.toolTip(2)
    hub.search.setText("vision smolvlm")
    visible = [hub.tree.topLevelItem(i).data(0, Qt.ItemDataRole.UserRole)
               for i in range(hub.tree.topLevelItemCount())
               if not hub.tree.topLevelItem(i).isHidden()]
    assert visible == ["smolvlm-256m-instruct", "smolvlm-500m-instruct"]
