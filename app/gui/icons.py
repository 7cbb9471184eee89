"""The window's own icons: SVG line drawings in assets/icons/, drawn in the theme's text color.

The files say `currentColor` (Qt's SVG renderer does not know it), replaced here by the
palette's color, so one drawing serves the light and the dark theme.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QByteArray, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

from app import resources

log = logging.getLogger(__name__)

ICON_PIXELS = 48  # drawn at twice the rail's 24 px, so they stay sharp on a HiDPI screen


def icon_file(name: str):
    return resources.asset(f"icons/{name}.svg")


def themed_icon(name: str, color: QColor) -> QIcon:
    """assets/icons/NAME.svg in `color`; an empty icon (the rail shows its text alone) when
    the file is missing or unreadable, which is logged."""
    path = icon_file(name)
    try:
        svg = path.read_text(encoding="utf-8").replace("currentColor", color.name())
    except OSError as e:
        log.warning("icon %s cannot be read (%s); the rail shows its text alone", path, e)
        return QIcon()
    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    if not renderer.isValid():
        log.warning("icon %s is not a valid SVG; the rail shows its text alone", path)
        return QIcon()
    pixmap = QPixmap(ICON_PIXELS, ICON_PIXELS)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    renderer.render(painter, QRectF(0, 0, ICON_PIXELS, ICON_PIXELS))
    painter.end()
    return QIcon(pixmap)


def badge_icon(color: str, size: int = 12) -> QIcon:
    """A filled dot in a fit badge's color (app.gui.catalog_page.BADGE_COLOR)."""
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(color))
    painter.drawEllipse(1, 1, size - 2, size - 2)
    painter.end()
    return QIcon(pixmap)
