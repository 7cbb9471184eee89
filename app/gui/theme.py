"""Light and dark themes: a Fusion palette plus a small style sheet from assets/."""

from __future__ import annotations

import logging

from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication

from app import resources

log = logging.getLogger(__name__)

DARK = {
    QPalette.ColorRole.Window: "#1e1f22", QPalette.ColorRole.WindowText: "#e6e6e6",
    QPalette.ColorRole.Base: "#2b2d31", QPalette.ColorRole.AlternateBase: "#313338",
    QPalette.ColorRole.Text: "#e6e6e6", QPalette.ColorRole.Button: "#2b2d31",
    QPalette.ColorRole.ButtonText: "#e6e6e6", QPalette.ColorRole.Highlight: "#d9622b",
    QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: "#2b2d31",
    QPalette.ColorRole.ToolTipText: "#e6e6e6", QPalette.ColorRole.PlaceholderText: "#8a8d93",
    QPalette.ColorRole.Link: "#8ab4f8",
}


def apply_theme(app: QApplication, theme: str, font_size: int) -> None:
    app.setStyle("Fusion")
    palette = app.style().standardPalette()
    if theme == "dark":
        for role, color in DARK.items():
            palette.setColor(role, QColor(color))
    else:
        palette.setColor(QPalette.ColorRole.Highlight, QColor("#d9622b"))
    app.setPalette(palette)
    font = QFont(app.font())
    font.setPointSize(font_size)
    app.setFont(font)
    sheet = resources.asset(f"style-{theme}.qss")
    if not sheet.exists():  # a build that left assets/ out: the palette alone still works
        log.warning("style sheet %s is missing; using the plain %s palette", sheet, theme)
    app.setStyleSheet(sheet.read_text(encoding="utf-8") if sheet.exists() else "")
