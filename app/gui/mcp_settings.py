"""Settings for MCP tools: mcp.json in a text editor that checks it before saving (a file
with a mistake is never written; the message names the mistake), and the tools allowed always,
which can be forgotten."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
)

from app.config import Paths
from app.mcp.approvals import Approvals
from app.mcp.config import EXAMPLE, McpConfigError, read_mcp_text, save_mcp_text


class McpSettingsBox(QGroupBox):
    def __init__(self, home: Paths) -> None:
        super().__init__("MCP servers (tools for the chat)")
        self.home = home
        self.approvals = Approvals(home.mcp_approvals)
        column = QVBoxLayout(self)
        where = QLabel(f"{home.mcp_file}: the mcpServers form of Cursor and Claude Desktop. "
                       "Switch servers on per chat with its Tools button.")
        where.setWordWrap(True)
        where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(where)
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("mcp-json")
        self.editor.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.editor.setPlaceholderText(EXAMPLE)
        self.editor.setMaximumHeight(140)
        self.error = QLabel()
        self.error.setObjectName("note")
        self.error.setWordWrap(True)
        try:
            self.saved_text = read_mcp_text(home.mcp_file)
        except McpConfigError as e:
            self.saved_text = ""
            self.editor.setReadOnly(True)  # nothing shown can be saved over what is there
            self.error.setText(str(e))
        self.editor.setPlainText(self.saved_text)
        column.addWidget(self.editor)
        row = QHBoxLayout()
        self.save_button = QPushButton("Save mcp.json")
        self.save_button.clicked.connect(self.save)
        row.addWidget(self.save_button)
        row.addWidget(self.error, 1)
        column.addLayout(row)
        column.addWidget(QLabel("Tools allowed always (their calls run without asking):"))
        self.allowed = QListWidget()
        self.allowed.setMaximumHeight(60)
        column.addWidget(self.allowed)
        forget = QPushButton("Forget")
        forget.clicked.connect(self.forget)
        column.addWidget(forget, 0, Qt.AlignmentFlag.AlignLeft)
        self._list_allowed()

    @property
    def changed(self) -> bool:
        return not self.editor.isReadOnly() and self.editor.toPlainText() != self.saved_text

    def save(self) -> bool:
        """Check and write mcp.json; False (the error shown, the file untouched) if invalid."""
        text = self.editor.toPlainText()
        try:
            servers = save_mcp_text(self.home.mcp_file, text)
        except (McpConfigError, OSError) as e:
            self.error.setText(f"Not saved: {e}")
            return False
        self.saved_text = text
        names = ", ".join(servers)
        self.error.setText(f"Saved: {len(servers)} server{'s' if len(servers) != 1 else ''}"
                           + (f" ({names})" if names else ""))
        return True

    def _list_allowed(self) -> None:
        self.allowed.clear()
        try:
            self.allowed.addItems(self.approvals.all())
        except McpConfigError as e:
            self.error.setText(str(e))

    def forget(self) -> None:
        item = self.allowed.currentItem()
        if item is None:
            return
        server, _, tool = item.text().partition("/")
        try:
            self.approvals.forget(server, tool)
        except (McpConfigError, OSError) as e:
            self.error.setText(str(e))
        self._list_allowed()
