"""The "< 2/3 >" under a message that has other versions (an edited question, a regenerated
answer): the arrows show the previous or next version, and the path that was below it."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from app.history_tree import Version


class BranchSwitcher(QWidget):
    switch_requested = Signal(int)  # the message id of the version to show

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("branch-switcher")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.previous = QPushButton("<")
        self.previous.setToolTip("Show the previous version")
        self.label = QLabel()
        self.label.setObjectName("versions")
        self.next = QPushButton(">")
        self.next.setToolTip("Show the next version")
        for w in (self.previous, self.next):
            w.setFlat(True)
            w.setFixedWidth(28)
        row.addWidget(self.previous)
        row.addWidget(self.label)
        row.addWidget(self.next)
        row.addStretch(1)
        self.version = Version(0, 1, ())
        self.previous.clicked.connect(lambda: self._step(-1))
        self.next.clicked.connect(lambda: self._step(1))
        self.hide()

    def set_version(self, version: Version) -> None:
        """Shown only for a message with more than one version."""
        self.version = version
        self.label.setText(f"{version.index + 1}/{version.count}")
        self.set_enabled(True)
        self.setVisible(version.count > 1)

    def set_enabled(self, on: bool) -> None:
        """Off while an answer streams: the path it belongs to must stay shown."""
        self.previous.setEnabled(on and self.version.index > 0)
        self.next.setEnabled(on and self.version.index < self.version.count - 1)

    def _step(self, by: int) -> None:
        index = self.version.index + by
        if 0 <= index < self.version.count:
            self.switch_requested.emit(self.version.siblings[index])


def show_version(message: QWidget, version: Version, on_switch: Callable[[int], None],
                 enabled: bool) -> None:
    """Update the switcher under a message widget (app.gui.chat_view.MessageWidget), adding
    one the first time the message has more than one version."""
    found = message.findChild(BranchSwitcher)
    if found is None:
        if version.count <= 1:
            return
        found = BranchSwitcher()
        found.switch_requested.connect(on_switch)
        layout = message.layout()
        assert layout is not None  # a MessageWidget always has its column
        layout.addWidget(found)
    found.set_version(version)
    found.set_enabled(enabled)
