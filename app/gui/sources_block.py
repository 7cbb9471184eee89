"""Under an answer made with the chat's documents: "Sources: report.pdf, page 12; …", one click
to see each piece the model was given, with its citation.

The pieces come from the document library (app.documents.library.DocumentLibrary.used_by);
an answer whose pieces the library does not hold (a conversation imported from a JSON export)
shows the citations kept in its stats (`stats["sources"]`), without their text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QToolButton, QVBoxLayout

if TYPE_CHECKING:
    from app.documents.context import DocumentContext

PIECE_CHARS = 1500  # what the block shows of a long piece (the model was given all of it)
SUMMARY_CHARS = 160  # the folded line; the tooltip has every citation


@dataclass(frozen=True)
class Source:
    citation: str  # "report.pdf, page 12" (app.documents.pieces.Piece.citation)
    text: str  # the piece as the model read it; "" when only the citation is known


def sources_of(context: DocumentContext) -> list[Source]:
    return [Source(p.citation(), p.text) for p in context.pieces]


def citations_of(stats: dict | None) -> list[Source]:
    """The citations an answer's stats keep (what export and import carry)."""
    cited = (stats or {}).get("sources") or []
    return [Source(str(c), "") for c in cited if isinstance(c, str)]


def summary(sources: Iterable[Source]) -> str:
    line = "Sources: " + "; ".join(s.citation for s in sources)
    return line if len(line) <= SUMMARY_CHARS else line[:SUMMARY_CHARS - 1] + "…"


class SourcesBlock(QFrame):
    """Folded: one line of citations; unfolded: each piece under its citation."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("sources")
        self.sources: list[Source] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 2)
        self.toggle = QToolButton()
        self.toggle.setObjectName("sources-toggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.toggled.connect(self._unfold)
        layout.addWidget(self.toggle)
        self.pieces = QLabel()
        self.pieces.setObjectName("sources-pieces")
        self.pieces.setTextFormat(Qt.TextFormat.PlainText)
        self.pieces.setWordWrap(True)
        self.pieces.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.pieces.hide()
        layout.addWidget(self.pieces)
        self.set_sources([])

    def set_sources(self, sources: list[Source]) -> None:
        self.sources = list(sources)
        self.toggle.setText(summary(self.sources))
        self.toggle.setToolTip("\n".join(s.citation for s in self.sources))
        self.pieces.setText(self._pieces_text())
        self.setVisible(bool(self.sources))
        if not self.sources:
            self.toggle.setChecked(False)

    def _pieces_text(self) -> str:
        parts = []
        for s in self.sources:
            text = s.text if len(s.text) <= PIECE_CHARS else (
                s.text[:PIECE_CHARS] + f"… ({len(s.text) - PIECE_CHARS} more characters)")
            parts.append(f"— {s.citation}\n{text}" if text else f"— {s.citation}")
        return "\n\n".join(parts)

    @property
    def unfolded(self) -> bool:
        return self.toggle.isChecked()

    def _unfold(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.pieces.setVisible(on)
