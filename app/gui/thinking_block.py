"""The parts of an answer beside its text: the model's thinking, and the tools it called.

Thinking is a collapsible block above the answer, the way Ollama's and Jan's windows show it
(docs/wire-formats.md C.7): open and growing while the model thinks, folded to "Thought for N s"
once the answer starts; a click on its header opens or folds it again.
"""

from __future__ import annotations

import json

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QFrame, QLabel, QToolButton, QVBoxLayout

from backends.base import ToolCall

RENDER_INTERVAL_MS = 100  # as the answer's text: ~10 updates a second, not one per token


def thought_for(seconds: float | None) -> str:
    """The folded header, in whole seconds, at least 1 ("Thought for 0 s" reads as a bug)."""
    if seconds is None:
        return "Thoughts"  # an answer cut off before its thinking was timed
    return f"Thought for {max(1, round(seconds))} s"


class ThinkingBlock(QFrame):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("thinking")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.setSpacing(2)
        self.header = QToolButton()
        self.header.setObjectName("thinking-header")
        self.header.setAutoRaise(True)
        self.header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.header.setCursor(Qt.CursorShape.PointingHandCursor)
        self.header.clicked.connect(self.toggle)
        layout.addWidget(self.header)
        self.body = QLabel()
        self.body.setObjectName("thinking-text")
        self.body.setTextFormat(Qt.TextFormat.PlainText)
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.body)
        self.text = ""
        self.thinking = False  # the model is still thinking
        self._title = ""
        self._render_timer = QTimer(self, singleShot=True, interval=RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(lambda: self.body.setText(self.text))
        self.hide()

    @property
    def expanded(self) -> bool:
        return not self.body.isHidden()

    @property
    def title(self) -> str:
        return self._title

    def _set(self, title: str, expanded: bool) -> None:
        self._title = title
        self.header.setArrowType(Qt.ArrowType.DownArrow if expanded
                                 else Qt.ArrowType.RightArrow)
        self.header.setText(title)
        self.body.setVisible(expanded)

    def toggle(self) -> None:
        self._set(self._title, not self.expanded)

    def append(self, piece: str) -> None:
        """More thinking streamed: the block opens on the first piece."""
        if not self.thinking:
            self.thinking = True
            self.show()
            self._set("Thinking…", True)
        self.text += piece
        if not self._render_timer.isActive():
            self._render_timer.start()

    def finish(self, seconds: float | None, stopped: bool = False) -> None:
        """The answer started (or the request ended): fold to "Thought for N s"."""
        self.thinking = False
        self._render_timer.stop()
        self.body.setText(self.text)
        self._set(thought_for(seconds) + (" (stopped)" if stopped else ""), False)

    def set_stored(self, text: str, seconds: float | None, stopped: bool = False) -> None:
        """A stored answer's thinking, folded; nothing is shown when it had none."""
        self.text = text
        self.thinking = False
        self.body.setText(text)
        self.setVisible(bool(text))
        self.finish(seconds, stopped)


def call_line(call: ToolCall) -> str:
    try:  # arguments as compact JSON, whatever spacing the model used
        args = json.dumps(json.loads(call.arguments or "{}"), ensure_ascii=False,
                          separators=(", ", ": "))
    except ValueError:
        args = call.arguments
    return f"{call.name}({args})"


class ToolCallsBlock(QLabel):
    """The calls an answer made, one line each: name(arguments)."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("tool-calls")
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.calls: tuple[ToolCall, ...] = ()
        self.hide()

    def set_calls(self, calls: tuple[ToolCall, ...]) -> None:
        self.calls = calls
        self.setText("\n".join("Called " + call_line(c) for c in calls))
        self.setVisible(bool(calls))
