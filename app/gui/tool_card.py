"""A tool call in the chat, as a card: the tool and its server, the arguments, the user's
decision (Allow / Allow always / Deny) while it waits, then the result and how long it took,
or the one line that says why it did not run.

A card is the widget of a stored `tool` message; its `stats` (app.chat.tools) carry what
the card shows besides the result: tool, server, arguments, outcome and seconds.
"""

from __future__ import annotations

import json

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout

RESULT_CHARS = 2000  # what the card shows of a long result (the model gets all of it)
DECISIONS = {"Allow": "allow", "Allow always": "always", "Deny": "deny"}
OUTCOME_NOTE = {
    "pending": "Waiting for you: this tool can act on your machine.",
    "running": "Running…",
    "denied": "Denied: the model was told it was not run.",
    "stopped": "Not run: the answer was stopped.",
}


def arguments_text(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False, indent=1)
    except ValueError:
        return arguments


class ToolCard(QFrame):
    decided = Signal(str)  # "allow", "always" or "deny"

    def __init__(self, result: str = "", status: str = "complete",
                 stats: dict | None = None) -> None:
        super().__init__()
        self.role = "tool"
        self.text = result
        self.stats = dict(stats or {})
        self.setObjectName("tool-card")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        server = self.stats.get("server")
        self.header = QLabel(f"Tool call: {self.stats.get('tool', '?')}"
                             + (f"  ·  MCP server {server}" if server else ""))
        self.header.setObjectName("role")
        layout.addWidget(self.header)
        self.arguments = QLabel(arguments_text(self.stats.get("arguments", "")))
        self.arguments.setObjectName("tool-arguments")
        self.arguments.setTextFormat(Qt.TextFormat.PlainText)
        self.arguments.setWordWrap(True)
        self.arguments.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.arguments)
        row = QHBoxLayout()
        self.buttons: dict[str, QPushButton] = {}
        for label, decision in DECISIONS.items():
            button = QPushButton(label)
            button.clicked.connect(lambda _=False, d=decision: self._decide(d))
            row.addWidget(button)
            self.buttons[label] = button
        row.addStretch(1)
        layout.addLayout(row)
        self.note = QLabel()
        self.note.setObjectName("note")
        self.note.setWordWrap(True)
        layout.addWidget(self.note)
        self.result = QLabel()
        self.result.setObjectName("tool-result")
        self.result.setTextFormat(Qt.TextFormat.PlainText)
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.result)
        outcome = self.stats.get("outcome", "ok")
        if status == "interrupted" and outcome in ("pending", "running"):
            self.set_outcome("stopped", "Not run: Ember stopped before this call finished.")
        else:
            self.set_outcome(outcome, result)

    @property
    def outcome(self) -> str:
        return self.stats.get("outcome", "ok")

    @property
    def waiting(self) -> bool:
        return self.outcome == "pending"

    def _decide(self, decision: str) -> None:
        if self.waiting:
            self.decided.emit(decision)

    def set_outcome(self, outcome: str, text: str = "", seconds: float | None = None) -> None:
        """pending (the buttons show), running, ok, error (text: the line that says why),
        denied or stopped."""
        self.stats["outcome"] = outcome
        if seconds is not None:
            self.stats["seconds"] = round(seconds, 3)
        for button in self.buttons.values():
            button.setVisible(outcome == "pending")
        if outcome in ("ok", "error"):
            self.text = text
            seconds = self.stats.get("seconds")
            took = f" in {seconds:.2f} s" if seconds is not None else ""
            self.note.setText(f"Done{took}." if outcome == "ok" else
                              f"Failed{took}: the model was told why.")
            shown = text if len(text) <= RESULT_CHARS else (
                text[:RESULT_CHARS] + f"… ({len(text) - RESULT_CHARS} more characters)")
            self.result.setText(shown)
        else:
            self.note.setText(text if outcome == "stopped" and text else OUTCOME_NOTE[outcome])
            self.result.setText("")
        self.result.setVisible(bool(self.result.text()))
