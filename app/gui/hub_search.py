"""The Models page's Hugging Face tab: search the Hub, open a repo to its quantizations with
their size and fit badge (read from the files' headers, nothing downloaded), and download one
through the page's download rows (app.gui.catalog_page.DownloadRow, `ember pull hf.co/...`).

The search and each repo's listing run on tasks (app.gui.tasks.HubSearchTask, HubFilesTask);
this widget only shows what they report.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.gui.tasks import HubFilesTask, HubSearchTask
from app.hardware import HardwareProfile
from app.pull.hf_fit import QuantFit
from app.pull.hf_repo import RepoListing
from app.pull.hf_search import HubRepo

BADGE_COLOR = {"full_gpu": "#2e7d32", "partial": "#b26a00", "cpu": "#1565c0",
               "wont_fit": "#c62828"}
COLUMNS = ["Repository / quantization", "Size", "Downloads", "Likes", "Updated", "Licence",
           "Fit", "Memory", "Speed", ""]
DOWNLOAD_COLUMN = len(COLUMNS) - 1
FORMATS = {"GGUF and MLX": None, "GGUF": "gguf", "MLX": "mlx"}
REPO_ROLE = Qt.ItemDataRole.UserRole


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def _bytes(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


class HubSearchPanel(QWidget):
    download_requested = Signal(str)  # hf.co/OWNER/REPO:QUANT

    def __init__(self, hardware: HardwareProfile,
                 installed: Callable[[str], bool] = lambda name: False) -> None:
        super().__init__()
        self.hardware = hardware
        self.installed = installed  # hf.co/OWNER/REPO:QUANT is in the store already
        self.tasks: list[HubSearchTask | HubFilesTask] = []  # kept alive while they run
        self.listings: dict[str, RepoListing] = {}
        layout = QVBoxLayout(self)
        row = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search Hugging Face (e.g. qwen2.5 coder gguf)")
        self.query.setClearButtonEnabled(True)
        self.format = QComboBox()
        self.format.addItems(list(FORMATS))
        self.button = QPushButton("Search")
        for w in (self.query, self.format, self.button):
            row.addWidget(w, 1 if w is self.query else 0)
        layout.addLayout(row)
        self.status = QLabel("Search the Hub for GGUF and MLX models; open a repository to "
                             "see its quantizations and how each fits this machine.")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setColumnWidth(0, 300)
        self.tree.setColumnWidth(7, 280)
        # shown: name, Size, [Download], Fit, Speed, Memory, then the repo's facts, so the
        # button and the fit are on screen without scrolling
        header = self.tree.header()
        for at, column in enumerate((1, DOWNLOAD_COLUMN, 6, 8, 7)):
            header.moveSection(header.visualIndex(column), at + 1)
        layout.addWidget(self.tree, 1)
        self.button.clicked.connect(self.search)
        self.query.returnPressed.connect(self.search)
        self.tree.itemExpanded.connect(self._opened)

    # -- search ----------------------------------------------------------------------------
    def search(self) -> None:
        query = self.query.text().strip()
        self.status.setText(f"searching the Hub for {query!r}…" if query
                            else "listing the Hub's most downloaded models…")
        task = HubSearchTask(query, FORMATS[self.format.currentText()])
        task.found.connect(self._found)
        task.failed.connect(lambda q, why: self.status.setText(f"search failed: {why}"))
        self._run(task)

    def _run(self, task: HubSearchTask | HubFilesTask) -> None:
        self.tasks.append(task)
        task.start()

    def _found(self, query: str, repos: list[HubRepo]) -> None:
        if query != self.query.text().strip():
            return  # an older search's answer
        self.tree.clear()
        self.listings.clear()
        for r in repos:
            licence = (r.license or "?") + (" · gated" if r.gated else "")
            item = QTreeWidgetItem([r.id, "", _count(r.downloads), _count(r.likes),
                                    r.last_modified.date().isoformat() if r.last_modified
                                    else "?", licence, "", "", "", ""])
            item.setData(0, REPO_ROLE, r.id)
            item.setToolTip(0, f"hf.co/{r.id} ({', '.join(r.formats) or 'format unknown'})")
            if r.gated:
                item.setToolTip(5, "gated: accept its licence on huggingface.co, then set "
                                   "HF_TOKEN to a token of that account")
            item.setChildIndicatorPolicy(QTreeWidgetItem.ChildIndicatorPolicy.ShowIndicator)
            self.tree.addTopLevelItem(item)
        self.status.setText(f"{len(repos)} repositories" + (f" for {query!r}" if query else "")
                            + "; open one to see its quantizations")

    def repo_item(self, repo: str) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item is not None and item.data(0, REPO_ROLE) == repo:
                return item
        return None

    # -- a repo's quantizations --------------------------------------------------------------
    def _opened(self, item: QTreeWidgetItem) -> None:
        repo = item.data(0, REPO_ROLE)
        if item.parent() is not None or item.childCount() or not repo:
            return
        item.addChild(QTreeWidgetItem(["reading the files' headers…"]))
        task = HubFilesTask(repo, self.hardware)
        task.listed.connect(self._listed)
        task.failed.connect(self._listing_failed)
        self._run(task)

    def _listing_failed(self, repo: str, why: str) -> None:
        item = self.repo_item(repo)
        if item is not None:
            item.takeChildren()
            child = QTreeWidgetItem([why])
            child.setToolTip(0, why)
            item.addChild(child)

    def _listed(self, repo: str, listing: RepoListing, fits: list[QuantFit],
                best: str) -> None:
        item = self.repo_item(repo)
        if item is None:
            return
        self.listings[repo] = listing
        item.takeChildren()
        if not fits:
            item.addChild(QTreeWidgetItem(["no GGUF, MLX or safetensors model Ember can run"]))
        for f in fits:
            parts = f" ({len(f.quant.files)} parts)" if f.quant.split else ""
            name = ("★ " if f.quant.name == best else "") + f.quant.name + parts
            child = QTreeWidgetItem([name, _bytes(f.quant.size), "", "", "", "", "", "", "",
                                     ""])
            child.setData(0, REPO_ROLE, f"hf.co/{repo}:{f.quant.name}")
            if f.fit is not None:
                child.setText(6, f.fit.label)
                child.setForeground(6, QBrush(QColor(BADGE_COLOR[f.fit.placement])))
                child.setToolTip(6, f.fit.explain())
                child.setText(7, f.fit.memory.describe(f.fit.context))
                if f.fit.placement != "wont_fit":
                    child.setText(8, f"~{f.fit.decode_tokens_per_s:.1f} tok/s")
            else:
                child.setText(6, "unreadable")
                child.setToolTip(6, f.error or "")
            item.addChild(child)
            ref = f"hf.co/{repo}:{f.quant.name}"
            button = QPushButton("Use" if self.installed(ref) else "Download")
            if f.fit is None:  # a pull says why again, before downloading (a gated repo's
                # licence line, a file that is no GGUF), so the button stays
                button.setToolTip(f"its header could not be read: {f.error or 'unknown'}")
            button.clicked.connect(lambda _=False, r=ref: self.download_requested.emit(r))
            self.tree.setItemWidget(child, DOWNLOAD_COLUMN, button)
        projector = listing.projector()
        if projector is not None:
            item.addChild(QTreeWidgetItem([f"+ vision projector {projector.name}, fetched "
                                           "with any of them"]))

    def refresh_buttons(self) -> None:
        """Each listed quantization's button as the store now stands: Use once installed."""
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            repo = top.data(0, REPO_ROLE) if top is not None else None
            for row in self.quant_rows(repo) if repo else ():
                button = self.tree.itemWidget(row, DOWNLOAD_COLUMN)
                if isinstance(button, QPushButton):
                    button.setText("Use" if self.installed(row.data(0, REPO_ROLE))
                                   else "Download")

    def quant_rows(self, repo: str) -> list[QTreeWidgetItem]:
        item = self.repo_item(repo)
        if item is None:
            return []
        children = [item.child(i) for i in range(item.childCount())]
        return [c for c in children if c is not None and c.data(0, REPO_ROLE)]
