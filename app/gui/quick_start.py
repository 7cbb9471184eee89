"""First run: one button on "Your machine" that downloads the model recommended for this
machine, shows the download's progress right there, and (MainWindow) opens a chat on it."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QLabel, QProgressBar, QPushButton, QVBoxLayout

from app.fit import Fit
from app.gui.catalog_page import DownloadRow, human_bytes, speed_text
from app.registry import ModelSpec


class QuickStart(QFrame):
    requested = Signal(str)  # MODEL:QUANT

    def __init__(self, spec: ModelSpec, fit: Fit) -> None:
        super().__init__()
        self.setObjectName("card")
        self.ref = f"{spec.id}:{fit.quant}"
        size = next((v.size_bytes for v in spec.variants if v.quant == fit.quant), 0)
        layout = QVBoxLayout(self)
        heading = QLabel("Start here")
        heading.setObjectName("heading")
        layout.addWidget(heading)
        about = QLabel(f"<b>{spec.name}</b> ({fit.quant}, {human_bytes(size)}) runs well on "
                       f"this machine: {fit.label}, {speed_text(fit.decode_tokens_per_s)}. "
                       f"{spec.description}")
        about.setWordWrap(True)
        layout.addWidget(about)
        self.button = QPushButton(f"Download {spec.name} and start chatting")
        self.button.setObjectName("primary")  # the page's one accent-colored button
        self.button.setDefault(True)
        self.button.clicked.connect(lambda _=False: self.requested.emit(self.ref))
        layout.addWidget(self.button)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setVisible(False)
        layout.addWidget(self.bar)
        self.detail = QLabel()
        self.detail.setWordWrap(True)
        self.detail.setVisible(False)
        layout.addWidget(self.detail)
        self.row: DownloadRow | None = None

    def follow(self, row: DownloadRow) -> None:
        """Show `row`'s download here (the Get models page shows it too, with Cancel)."""
        if self.row is not row:
            self.row = row
            row.changed.connect(self._changed)
        self.button.setEnabled(False)
        self.button.setText("Downloading…")
        self.bar.setVisible(True)
        self.detail.setVisible(True)
        self._changed(row.bar.value(), row.detail.text())

    def _changed(self, value: int, text: str) -> None:
        self.bar.setValue(value)
        self.detail.setText(text)
        if self.row is not None and self.row.state in ("failed", "cancelled"):
            self.button.setEnabled(True)
            self.button.setText("Resume the download" if self.row.state == "cancelled"
                                else "Try the download again")
