"""The row under a message: "< 2/3 >" when it has other versions (an edited question, a
regenerated answer), where the arrows show the previous or next version and the path that
was below it; and, under a question, Edit, which makes a new version of it."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from app.history_tree import Version


class BranchSwitcher(QWidget):
    switch_requested = Signal(int)  # the message id of the version to show
    edit_requested = Signal(int)  # the message id of the question to edit

    def __init__(self, message_id: int, editable: bool) -> None:
        super().__init__()
        self.setObjectName("branch-switcher")
        self.message_id, self.editable = message_id, editable
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.previous = QPushButton("<")
        self.previous.setToolTip("Show the previous version")
        self.label = QLabel()
        self.label.setObjectName("versions")
        self.next = QPushButton(">")
        self.next.setToolTip("Show the next version")
        self.edit = QPushButton("Edit")
        self.edit.setToolTip("Change this message: the answer to the new text is a new "
                             "version, and this one stays")
        for w in (self.previous, self.next, self.edit):
            w.setFlat(True)
        for w in (self.previous, self.next):
            w.setFixedWidth(28)
        self.edit.setFixedWidth(self.edit.fontMetrics().horizontalAdvance("Edit") + 20)
        for part in (self.previous, self.label, self.next, self.edit):
            row.addWidget(part)
        row.addStretch(1)
        self.version = Version(0, 1, ())
        self.previous.clicked.connect(lambda: self._step(-1))
        self.next.clicked.connect(lambda: self._step(1))
        self.edit.clicked.connect(lambda: self.edit_requested.emit(self.message_id))
        self.edit.setVisible(editable)

    def set_version(self, version: Version) -> None:
        """The arrows show only for a message with more than one version."""
        self.version = version
        self.label.setText(f"{version.index + 1}/{version.count}")
        for part in (self.previous, self.label, self.next):
            part.setVisible(version.count > 1)
        self.setVisible(version.count > 1 or self.editable)

    def set_enabled(self, on: bool) -> None:
        """Off while an answer streams: the path it belongs to must stay shown."""
        self.previous.setEnabled(on and self.version.index > 0)
        self.next.setEnabled(on and self.version.index < self.version.count - 1)
        self.edit.setEnabled(on)

    def _step(self, by: int) -> None:
        index = self.version.index + by
        if 0 <= index < self.version.count:
            self.switch_requested.emit(self.version.siblings[index])


def show_version(message: QWidget, message_id: int, version: Version, editable: bool,
                 on_switch: Callable[[int], None], on_edit: Callable[[int], None],
                 enabled: bool) -> None:
    """Update the row under a message widget (app.gui.chat_view.MessageWidget), adding it
    the first time the message has more than one version or can be edited."""
    found = message.findChild(BranchSwitcher)
    if found is None:
        if version.count <= 1 and not editable:
            return
        found = BranchSwitcher(message_id, editable)
        found.switch_requested.connect(on_switch)
        found.edit_requested.connect(on_edit)
        layout = message.layout()
        assert layout is not None  # a MessageWidget always has its column
        layout.addWidget(found)
    found.set_version(version)
    found.set_enabled(enabled)
