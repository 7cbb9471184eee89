""""Get models": the whole registry with a fit badge per quantization, any Hugging Face repo
(the Hugging Face tab, app.gui.hub_search), and the downloads.

The fit numbers come from app.fit (app/fit/) for the Runtime's hardware profile (a simulated one in
tests); downloads go through app.pull.install.pull on DownloadTask threads.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.fit import Fit, fits_for, recommend
from app.gui.hub_search import HubSearchPanel
from app.gui.tasks import DownloadTask
from app.hardware import HardwareProfile
from app.pull.progress import Progress
from app.registry import ModelSpec, Projector, load_registry
from app.store import InstalledModel, Store

BADGE_COLOR = {"full_gpu": "#2e7d32", "partial": "#b26a00", "cpu": "#1565c0",
               "wont_fit": "#c62828"}
# beside the name of a model that sees (a registry model whose GGUF variants have a projector),
# in the Models page and the model picker
VISION_MARK = "· vision"
COLUMNS = ["Model", "Quantization", "Size", "Fit", "Memory", "Speed", ""]


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def speed_text(tokens_per_s: float) -> str:
    return f"~{tokens_per_s:.0f} tok/s" if tokens_per_s >= 10 else f"~{tokens_per_s:.1f} tok/s"


def progress_text(p: Progress) -> str:
    """A download's progress as its row shows it: bytes, speed, time left, what it says."""
    phase = {"download": "", "verify": "verifying ", "install": "installing "}.get(p.phase, "")
    text = f"{phase}{human_bytes(p.done_bytes)} / {human_bytes(p.total_bytes)}"
    if p.phase == "download" and p.speed_bps:
        text += f" · {human_bytes(p.speed_bps)}/s"
        if p.eta_s is not None:
            text += f" · {int(p.eta_s // 60)}:{int(p.eta_s % 60):02d} left"
    if p.message and p.phase != "done":
        text += f" · {p.message}"
    return text


class DownloadRow(QWidget):
    """One download: bar, speed and ETA, Cancel; after a cancel or failure, Resume."""
    finished = Signal(object)  # InstalledModel
    changed = Signal(int, str)  # the bar's value (of 1000) and the detail text, as shown

    def __init__(self, ref: str, store: Store, hardware: HardwareProfile | None) -> None:
        super().__init__()
        self.ref, self.store, self.hardware = ref, store, hardware
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 2)
        self.name = QLabel(ref)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.detail = QLabel("starting…")
        self.detail.setMinimumWidth(240)
        self.button = QPushButton("Cancel")
        for w, stretch in ((self.name, 0), (self.bar, 1), (self.detail, 0), (self.button, 0)):
            layout.addWidget(w, stretch)
        self.button.clicked.connect(self._button)
        self.task: DownloadTask | None = None
        self.state = "idle"
        self.start()

    def start(self) -> None:
        self.task = DownloadTask(self.ref, self.store, self.hardware)
        self.task.progress.connect(self._progress)
        self.task.installed.connect(self._installed)
        self.task.failed.connect(self._failed)
        self.state = "running"
        self.button.setText("Cancel")
        self.task.start()

    def _button(self) -> None:
        if self.state == "running" and self.task is not None:
            self.task.cancel()
            self.detail.setText("cancelling…")
        elif self.state in ("cancelled", "failed"):
            self.start()

    def _progress(self, p: Progress) -> None:
        if p.total_bytes:
            self.bar.setValue(int(1000 * p.done_bytes / p.total_bytes))
        self._say(progress_text(p))

    def _say(self, text: str) -> None:
        self.detail.setText(text)
        self.changed.emit(self.bar.value(), text)

    def _installed(self, model: InstalledModel) -> None:
        self.state = "done"
        self.bar.setValue(1000)
        self._say("installed and verified (SHA-256)")
        self.button.setText("Done")
        self.button.setEnabled(False)
        self.finished.emit(model)

    def _failed(self, message: str, cancelled: bool) -> None:
        self.state = "cancelled" if cancelled else "failed"
        self._say(message)
        self.detail.setToolTip(message)
        self.button.setText("Resume" if cancelled else "Retry")


class HubWidget(QWidget):
    installed = Signal(object)  # InstalledModel, once verified

    def __init__(self, store: Store, hardware: HardwareProfile) -> None:
        super().__init__()
        self.store, self.hardware = store, hardware
        self.rows: dict[str, DownloadRow] = {}
        layout = QVBoxLayout(self)
        self.tabs = QTabWidget()
        catalog = QWidget()
        catalog_layout = QVBoxLayout(catalog)
        catalog_layout.setContentsMargins(0, 0, 0, 0)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search models (name, family, description)")
        self.search.setClearButtonEnabled(True)
        catalog_layout.addWidget(self.search)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setColumnWidth(0, 260)
        self.tree.setColumnWidth(1, 150)
        self.tree.setColumnWidth(3, 150)
        self.tree.setColumnWidth(4, 300)
        header = self.tree.header()  # shown: ... Fit, Speed, [Download], Memory (the widest)
        header.moveSection(5, 4)
        header.moveSection(6, 5)
        catalog_layout.addWidget(self.tree, 1)
        self.tabs.addTab(catalog, "Ember's catalog")
        self.hub_search = HubSearchPanel(
            hardware, installed=lambda name: self.store.from_hub(name) is not None)
        self.hub_search.download_requested.connect(self.download)
        self.installed.connect(lambda _model: self.hub_search.refresh_buttons())
        self.tabs.addTab(self.hub_search, "Hugging Face")
        layout.addWidget(self.tabs, 1)
        layout.addWidget(QLabel("Downloads"))
        self.downloads = QVBoxLayout()
        self.downloads.addStretch(1)
        box = QWidget()
        box.setLayout(self.downloads)
        layout.addWidget(box)
        self.search.textChanged.connect(self._filter)
        self.populate()

    def populate(self) -> None:
        self.tree.clear()
        installed = {m.ref for m in self.store.list()}
        for spec in load_registry().models:
            self._add_model(spec, installed)

    def _add_model(self, spec: ModelSpec, installed: set[str]) -> None:
        best = recommend(spec, self.hardware)
        newer = f" (superseded: try {spec.superseded_by})" if spec.superseded_by else ""
        sees = f" {VISION_MARK}" if spec.vision else ""  # search finds it: "vision"
        top = QTreeWidgetItem([spec.name + sees + newer, f"{len(spec.variants)} variants", "",
                               "", "", "", ""])
        top.setData(0, Qt.ItemDataRole.UserRole, spec.id)
        top.setToolTip(0, f"{spec.id}\n{spec.description}"
                          + ("\nvision: takes images (its GGUF variants come with a projector)"
                             if spec.vision else ""))
        if newer:
            top.setForeground(0, QBrush(QColor("#757575")))
        self.tree.addTopLevelItem(top)
        for fit in fits_for(spec, self.hardware):
            ref = f"{spec.id}:{fit.quant}"
            child = QTreeWidgetItem(["", fit.quant, human_bytes(self._size(spec, fit)),
                                     fit.label, fit.memory.describe(fit.context),
                                     speed_text(fit.decode_tokens_per_s)
                                     if fit.placement != "wont_fit" else "–", ""])
            child.setData(0, Qt.ItemDataRole.UserRole, ref)
            proj = self._projector(spec, fit)
            if proj is not None:
                child.setToolTip(2, f"+ vision projector {proj.file} "
                                    f"({human_bytes(proj.size_bytes)}), downloaded with it")
            child.setForeground(3, QBrush(QColor(BADGE_COLOR[fit.placement])))
            child.setToolTip(3, fit.explain())
            if best is not None and best.quant == fit.quant:
                child.setText(0, "★ recommended")
            top.addChild(child)
            if ref in installed:
                label = QLabel("Installed")
                self.tree.setItemWidget(child, 6, label)
            else:
                button = QPushButton("Download")
                button.clicked.connect(lambda _=False, r=ref: self.download(r))
                self.tree.setItemWidget(child, 6, button)
        if best is not None:  # the summary row shows the recommended variant
            top.setText(1, f"{best.quant} (of {len(spec.variants)})")
            top.setText(3, best.label)
            top.setForeground(3, QBrush(QColor(BADGE_COLOR[best.placement])))
            top.setText(4, f"{best.memory.total / 1e9:.1f} GB")
            if best.placement != "wont_fit":
                top.setText(5, speed_text(best.decode_tokens_per_s))

    @staticmethod
    def _projector(spec: ModelSpec, fit: Fit) -> Projector | None:
        return next((v.mmproj for v in spec.variants if v.quant == fit.quant
                     and v.format == fit.format), None)

    @staticmethod
    def _size(spec: ModelSpec, fit: Fit) -> int:
        return next(v.size_bytes for v in spec.variants if v.quant == fit.quant
                    and v.format == fit.format)

    def _filter(self, text: str) -> None:
        words = text.lower().split()
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            spec_id = item.data(0, Qt.ItemDataRole.UserRole)
            haystack = f"{spec_id} {item.text(0)} {item.toolTip(0)}".lower()
            item.setHidden(not all(w in haystack for w in words))

    def expand(self, spec_id: str) -> None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, Qt.ItemDataRole.UserRole) == spec_id:
                item.setExpanded(True)
                self.tree.scrollToItem(item)

    def variant_rows(self, spec_id: str) -> list[QTreeWidgetItem]:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, Qt.ItemDataRole.UserRole) == spec_id:
                return [item.child(j) for j in range(item.childCount())]
        return []

    def download(self, ref: str) -> DownloadRow:
        row = self.rows.get(ref)
        if row is not None and row.state == "running":
            return row
        if row is not None:
            row.start()
            return row
        row = DownloadRow(ref, self.store, self.hardware)
        row.finished.connect(self._installed)
        self.rows[ref] = row
        self.downloads.insertWidget(self.downloads.count() - 1, row)
        return row

    def _installed(self, model: InstalledModel) -> None:
        self.populate()
        self.installed.emit(model)

