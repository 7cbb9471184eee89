"""The Server page: start and stop Ember's local HTTP API (OpenAI and Ollama compatible) on
the window's Runtime, with its addresses, its key and a request to try, each ready to copy.

The server itself is app.gui.tasks.ServerTask, started by the window (MainWindow.toggle_server):
this page shows its state and asks for changes.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)


def example_request(url: str, model: str) -> str:
    """A request to paste in a terminal; the key stays out of it, as out of sight on the page
    (Copy puts it in EMBER_API_KEY's place)."""
    return ("# EMBER_API_KEY: the API key above (Copy)\n"
            f"curl {url}/v1/chat/completions \\\n"
            "  -H \"Authorization: Bearer $EMBER_API_KEY\" \\\n"
            f"  -H 'Content-Type: application/json' \\\n"
            f"  -d '{{\"model\": \"{model}\", "
            f"\"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'")


class CopyField(QWidget):
    """A read-only value with a Copy button (the key hidden until Show)."""

    def __init__(self, secret: bool = False) -> None:
        super().__init__()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.field = QLineEdit()
        self.field.setReadOnly(True)
        row.addWidget(self.field, 1)
        self.show_button: QPushButton | None = None
        if secret:
            self.field.setEchoMode(QLineEdit.EchoMode.Password)
            self.show_button = QPushButton("Show")
            self.show_button.setCheckable(True)
            self.show_button.toggled.connect(self._reveal)
            row.addWidget(self.show_button)
        self.copy = QPushButton("Copy")
        self.copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.field.text()))
        row.addWidget(self.copy)

    def _reveal(self, on: bool) -> None:
        self.field.setEchoMode(QLineEdit.EchoMode.Normal if on else QLineEdit.EchoMode.Password)
        if self.show_button is not None:
            self.show_button.setText("Hide" if on else "Show")

    def set_value(self, text: str) -> None:
        self.field.setText(text)
        self.setEnabled(bool(text))


class ServerPage(QWidget):
    toggle_requested = Signal()

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 20, 24, 20)
        layout.setSpacing(12)
        heading = QLabel("Local API server")
        heading.setObjectName("heading")
        layout.addWidget(heading)
        intro = QLabel("Lets other programs on this computer use your models: any OpenAI or "
                       "Ollama client (editors, agents, scripts) with the address and key "
                       "below. It shares the models this window has loaded, listens on "
                       "127.0.0.1 only, and a new key is made each time it starts.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        # where this window's models run: in this process, or in the Ember service it joined
        self.where = QLabel()
        self.where.setObjectName("server-where")
        self.where.setWordWrap(True)
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.where)
        row = QHBoxLayout()
        self.state = QLabel()
        self.state.setObjectName("server-state")
        row.addWidget(self.state, 1)
        self.button = QPushButton("Start")
        self.button.setObjectName("send")
        self.button.clicked.connect(self.toggle_requested)
        row.addWidget(self.button)
        layout.addLayout(row)
        card = QFrame()
        card.setObjectName("card")
        form = QFormLayout(card)
        form.setContentsMargins(14, 12, 14, 12)
        form.setVerticalSpacing(8)
        self.url = CopyField()
        self.openai = CopyField()
        self.ollama = CopyField()
        self.key = CopyField(secret=True)
        form.addRow("Address", self.url)
        form.addRow("OpenAI API", self.openai)
        form.addRow("Ollama API", self.ollama)
        form.addRow("API key", self.key)
        layout.addWidget(card)
        try_it = QLabel("Try it")
        try_it.setObjectName("role")
        layout.addWidget(try_it)
        self.example = QPlainTextEdit()
        self.example.setReadOnly(True)
        self.example.setObjectName("example")
        self.example.setMaximumHeight(110)
        self.example.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        layout.addWidget(self.example)
        layout.addStretch(1)
        self.model = "MODEL"
        self.joined = False
        self.url_now = self.key_now = ""
        self.state.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.show_state("stopped", running=False)

    def show_state(self, text: str, running: bool, url: str = "", key: str = "") -> None:
        """`text`: the state in words ("stopped", "starting…", "stopped: why"); `url` and
        `key` once it listens."""
        self.url_now, self.key_now = url, key
        self.state.setText(("Running at " + url) if url else text[:1].upper() + text[1:])
        self.button.setText("Stop" if running else "Start")
        self.url.set_value(url)
        self.openai.set_value(f"{url}/v1" if url else "")
        self.ollama.set_value(f"{url}/api" if url else "")
        self.key.set_value(key)
        self._show_example()

    def show_where(self, text: str, joined: bool) -> None:
        """`text`: "Using the Ember service at URL" or in-process (app.runtime.choose). A
        window that joined the service has no server of its own to start: the service's
        API is the one to use, and its models are this window's."""
        self.joined = joined
        self.where.setText(text + (": its API serves other programs too, with the models "
                                   "this window uses (`ember service status` shows it)."
                                   if joined else "."))
        self.button.setEnabled(not joined)

    def set_model(self, ref: str | None) -> None:
        """The model the example asks for: the one picked in the window."""
        self.model = ref or "MODEL"
        self._show_example()

    def _show_example(self) -> None:
        url = self.url_now
        self.example.setPlainText(example_request(url, self.model) if url else
                                  "Start the server to get its address and key.")
        self.example.setEnabled(bool(url))
