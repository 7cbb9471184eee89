"""Export (Ctrl+E) and import of conversations from the window (app.export does the work)."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from app.export import export_file
from app.history import History
from backends.errors import EmberError

FORMATS = {"md": "Markdown (.md): to read and share", "json": "JSON (.json): imports back"}


def file_stem(title: str) -> str:
    """A file name from a title: letters, digits, spaces and dashes only."""
    stem = re.sub(r"[^\w\- ]+", "", title).strip()[:60]
    return stem or "conversation"


class ExportDialog(QDialog):
    """Where, in which format, and this conversation or all of them."""

    def __init__(self, history: History, conversation_id: int | None, folder: Path,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export conversations")
        self.history, self.conversation_id = history, conversation_id
        self.written: Path | None = None
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.format = QComboBox()
        for key, label in FORMATS.items():
            self.format.addItem(label, key)
        form.addRow("Format", self.format)
        self.this_one = QRadioButton("This conversation")
        self.all = QRadioButton("All conversations")
        scope = QHBoxLayout()
        scope.addWidget(self.this_one)
        scope.addWidget(self.all)
        form.addRow("Export", scope)
        self.path = QLineEdit()
        browse = QPushButton("Browse…")
        where = QHBoxLayout()
        where.addWidget(self.path, 1)
        where.addWidget(browse)
        form.addRow("File", where)
        layout.addLayout(form)
        self.error = QLabel()
        self.error.setObjectName("note")
        self.error.setWordWrap(True)
        layout.addWidget(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel)
        self.save_button = buttons.button(QDialogButtonBox.StandardButton.Save)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

        self.this_one.setEnabled(conversation_id is not None)
        (self.this_one if conversation_id is not None else self.all).setChecked(True)
        title = history.get(conversation_id).title if conversation_id is not None \
            else "conversations"
        self.path.setText(str(folder / f"{file_stem(title)}.md"))
        self.format.currentIndexChanged.connect(self._format_changed)
        self.all.toggled.connect(self._scope_changed)
        browse.clicked.connect(self._browse)

    def _format_changed(self) -> None:
        path = Path(self.path.text())
        self.path.setText(str(path.with_suffix("." + self.format.currentData())))

    def _scope_changed(self, everything: bool) -> None:
        path = Path(self.path.text())
        if everything:
            self.path.setText(str(path.with_name("conversations" + path.suffix)))
        elif self.conversation_id is not None:
            title = self.history.get(self.conversation_id).title
            self.path.setText(str(path.with_name(file_stem(title) + path.suffix)))

    def _browse(self) -> None:
        chosen, _ = QFileDialog.getSaveFileName(self, "Export to", self.path.text())
        if chosen:
            self.path.setText(chosen)

    def save(self) -> None:
        """Write the file; an error is shown here and the dialog stays open."""
        text = self.path.text().strip()
        if not text:
            self.error.setText("Choose a file to export to.")
            return
        path = Path(text).expanduser()
        ids = None if self.all.isChecked() or self.conversation_id is None \
            else [self.conversation_id]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            export_file(self.history, path, ids, self.format.currentData())
        except (OSError, EmberError) as e:
            self.error.setText(f"Could not export: {e}")
            return
        self.written = path
        self.accept()


def import_file_dialog(parent: QWidget, folder: Path) -> QFileDialog:
    """A file dialog for an export file, opened without blocking (its fileSelected signal
    carries the choice); Qt's own dialog, so it looks the same everywhere."""
    dialog = QFileDialog(parent, "Import conversations", str(folder),
                         "Ember exports (*.json);;All files (*)")
    dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
    dialog.setOption(QFileDialog.Option.DontUseNativeDialog)
    dialog.open()
    return dialog
