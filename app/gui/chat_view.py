"""The conversation pane: one widget per message, the composer, the context meter, the find
bar (Ctrl+F), and the chat's documents: the paperclip, drops of files, the chips of what is
attached, and under an answer the sources it was given. Images pasted, dropped or chosen with
the paperclip wait as chips for the next question (app.gui.image_chips) and show in its
bubble."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication, QKeyEvent, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.document_chips import DocumentChips, local_files
from app.gui.find_bar import FindBar
from app.gui.icons import themed_icon
from app.gui.image_chips import BubbleImages, ImageChips, clipboard_png, images_filter
from app.gui.markdown import render_markdown
from app.gui.shortcuts import is_window_key
from app.gui.sources_block import Source, SourcesBlock
from app.gui.thinking_block import ThinkingBlock, ToolCallsBlock
from app.gui.tool_card import ToolCard
from app.gui.tools_button import ToolsButton
from backends.base import ToolCall

STATUS_NOTE = {
    "interrupted": "Interrupted: Ember stopped while this answer was streaming.",
    "stopped": "Stopped.",
    "error": "This answer ended with an error.",
}


RENDER_INTERVAL_MS = 100
BANNER_ACTIONS = ("Retry", "Pick a smaller quantization", "Download the embedding model",
                  "Switch to a model that sees", "Dismiss")


THINK_LABELS = {"on": "Think: on", "off": "Think: off", "low": "Think: low effort",
                "medium": "Think: medium effort", "high": "Think: high effort"}
ROLE_NAMES = {"user": "You", "assistant": "Ember", "system": "System", "tool": "Tool result"}


def stats_text(stats: dict) -> str:
    tokens = stats.get("completion_tokens", 0)
    line = (f"{tokens} token{'' if tokens == 1 else 's'} · "
            f"first token {stats.get('ttft_s', 0):.2f} s")
    if stats.get("decode_tokens_per_s"):  # none for a one-token answer: nothing was decoded
        line += f" · {stats['decode_tokens_per_s']:.1f} tokens/s"
    if stats.get("reasoning_tokens"):
        line += f" · {stats['reasoning_tokens']} of them thinking"
    if stats.get("cached_tokens"):
        line += f" · {stats['cached_tokens']} prompt tokens from cache"
    if stats.get("draft_tokens"):
        line += (f" · {stats.get('accepted_tokens', 0)} of {stats['draft_tokens']} speculative "
                 "tokens accepted")
    return line


class MessageText(QTextBrowser):
    """Rendered Markdown that is as tall as its content (the pane scrolls, not the message)."""

    def __init__(self, dark: bool) -> None:
        super().__init__()
        self.dark = dark
        self.code_blocks: list[str] = []
        self.setOpenLinks(False)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.anchorClicked.connect(self._link)

    def set_markdown(self, text: str) -> None:
        rendered = render_markdown(text, self.dark)
        self.code_blocks = rendered.code_blocks
        self.setHtml(rendered.html)
        self._fit_height()

    def loadResource(self, kind: int, name: QUrl) -> object:
        """Nothing named by a message is loaded: no image, no style sheet, no file (the
        Markdown renderer shows images as links; this holds for any HTML that gets here)."""
        return None

    def _fit_height(self) -> None:
        self.document().setTextWidth(max(self.viewport().width(), 100))
        self.setFixedHeight(int(self.document().size().height()) + 6)

    def _link(self, url: QUrl) -> None:
        if url.scheme() == "copy":
            index = int(url.path() or url.toString().split(":", 1)[1])
            QGuiApplication.clipboard().setText(self.code_blocks[index])
        elif url.scheme() in ("http", "https"):
            from PySide6.QtGui import QDesktopServices

            QDesktopServices.openUrl(url)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._fit_height()


class MessageWidget(QFrame):
    """One turn: who, the thinking (folded), the answer, the tools it called, a note, stats.
    `stats["thinking_s"]` is how long the model thought (the window times it)."""

    def __init__(self, role: str, text: str, dark: bool, status: str = "complete",
                 stats: dict | None = None, reasoning: str = "",
                 tool_calls: tuple[ToolCall, ...] = ()) -> None:
        super().__init__()
        self.role = role
        self.text = text
        self.setObjectName("message-" + role)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        who = QLabel(ROLE_NAMES.get(role, role))
        who.setObjectName("role")
        layout.addWidget(who)
        self.images = BubbleImages()  # a question's images (app.gui.image_chips)
        layout.addWidget(self.images)
        self.thinking = ThinkingBlock()
        layout.addWidget(self.thinking)
        self.thinking.set_stored(reasoning, (stats or {}).get("thinking_s"),
                                 stopped=status not in ("complete", "streaming"))
        self.body = MessageText(dark)
        layout.addWidget(self.body)
        self.tool_calls = ToolCallsBlock()
        layout.addWidget(self.tool_calls)
        self.tool_calls.set_calls(tool_calls)
        self.sources = SourcesBlock()  # the document pieces it was given (app.gui.sources_block)
        layout.addWidget(self.sources)
        self.note = QLabel()
        self.note.setObjectName("note")
        self.note.setWordWrap(True)
        layout.addWidget(self.note)
        self.stats = QLabel()
        self.stats.setObjectName("stats")
        layout.addWidget(self.stats)
        self.body.set_markdown(text)
        self._show_body()
        self.set_status(status, stats)
        self._render_timer = QTimer(self, singleShot=True, interval=RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self._render)

    def _show_body(self) -> None:
        # an answer that so far only thinks or calls tools has no empty text box under it
        self.body.setVisible(bool(self.text) or not (self.thinking.text
                                                      or self.tool_calls.calls))

    def append(self, piece: str) -> None:
        """Add streamed text; re-rendering waits for the next frame (RENDER_INTERVAL_MS), so a
        fast model costs the UI thread ~10 renders a second, not one per token."""
        self.text += piece
        self._show_body()
        if not self._render_timer.isActive():
            self._render_timer.start()

    def append_reasoning(self, piece: str) -> None:
        self.thinking.append(piece)
        self._show_body()

    def end_thinking(self, seconds: float | None, stopped: bool = False) -> None:
        if self.thinking.thinking:
            self.thinking.finish(seconds, stopped)

    def set_tool_calls(self, calls: tuple[ToolCall, ...]) -> None:
        self.tool_calls.set_calls(calls)
        self._show_body()

    def set_sources(self, sources: list[Source]) -> None:
        self.sources.set_sources(sources)

    def set_images(self, images: list[tuple[str, bytes]]) -> None:
        self.images.set_images(images)

    def _render(self) -> None:
        self.body.set_markdown(self.text)

    def set_text(self, text: str) -> None:
        self._render_timer.stop()
        self.text = text
        self.body.set_markdown(text)
        self._show_body()

    def set_status(self, status: str, stats: dict | None = None, note: str = "") -> None:
        note = note or STATUS_NOTE.get(status, "")
        if stats and stats.get("truncated"):
            note = (note + " " if note else "") + ("Earlier turns were dropped to fit the "
                                                   "context: the model did not see them.")
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.stats.setText(stats_text(stats) if stats and self.role == "assistant" else "")
        self.stats.setVisible(bool(self.stats.text()))


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter makes a new line. Files dropped on it are attached, not
    pasted as their paths."""
    submitted = Signal()
    files_dropped = Signal(list)  # [Path]
    image_pasted = Signal(bytes)  # Ctrl+V of an image: its PNG bytes

    def __init__(self) -> None:
        super().__init__()
        self.setPlaceholderText("Message Ember (Enter sends, Shift+Enter: new line)")
        self.setMaximumHeight(120)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent) \
                and is_window_key(event):
            return True  # left unaccepted: the window's shortcut runs (app.gui.shortcuts)
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                event.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(event)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        """A pasted image goes with the question (a chip); text is pasted as text."""
        png = clipboard_png(source)
        if png is not None:
            self.image_pasted.emit(png)
            return
        super().insertFromMimeData(source)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if local_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event) -> None:
        if local_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragMoveEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:
        files = local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.files_dropped.emit(files)
        else:
            super().dropEvent(event)


def documents_filter() -> str:
    """The file dialog's filter: the suffixes Ember reads, and every file (one it cannot read
    says why when attached)."""
    from app.documents.reader import SUPPORTED_SUFFIXES

    patterns = " ".join(f"*{suffix}" for suffix in sorted(SUPPORTED_SUFFIXES))
    return f"Documents ({patterns});;{images_filter()};;All files (*)"


class ChatView(QWidget):
    send_clicked = Signal()
    stop_clicked = Signal()
    regenerate_clicked = Signal()
    edit_clicked = Signal()
    banner_action = Signal(str)  # one of BANNER_ACTIONS
    think_changed = Signal(str)  # a Think setting (app.history.THINKING_SETTINGS)
    files_chosen = Signal(list)  # [Path] to attach: from the paperclip's dialog or a drop
    image_pasted = Signal(bytes)  # an image pasted into the composer (PNG bytes)

    def __init__(self, dark: bool = False) -> None:
        super().__init__()
        self.dark = dark
        self.messages: list[MessageWidget | ToolCard] = []
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        self.title = QLabel("New chat")
        self.title.setObjectName("title")
        top.addWidget(self.title, 1)
        self.meter = QProgressBar()
        self.meter.setObjectName("context-meter")
        self.meter.setMinimumWidth(300)
        self.meter.setTextVisible(True)
        top.addWidget(self.meter)
        layout.addLayout(top)
        self.banner = QFrame()
        self.banner.setObjectName("banner")
        banner_row = QHBoxLayout(self.banner)
        self.banner_text = QLabel()
        self.banner_text.setObjectName("banner")
        self.banner_text.setWordWrap(True)
        banner_row.addWidget(self.banner_text, 1)
        self.banner_buttons: dict[str, QPushButton] = {}
        for action in BANNER_ACTIONS:
            button = QPushButton(action)
            button.clicked.connect(lambda _=False, a=action: self.banner_action.emit(a))
            banner_row.addWidget(button)
            self.banner_buttons[action] = button
        self.banner.hide()
        layout.addWidget(self.banner)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = QWidget()
        self.column = QVBoxLayout(inner)
        self.column.addStretch(1)
        self.scroll.setWidget(inner)
        self.find_bar = FindBar(self.message_texts, self.scroll)
        layout.addWidget(self.find_bar)
        layout.addWidget(self.scroll, 1)
        actions = QHBoxLayout()
        self.regenerate = QPushButton("Regenerate")
        self.edit = QPushButton("Edit last message")
        actions.addWidget(self.regenerate)
        actions.addWidget(self.edit)
        actions.addStretch(1)
        layout.addLayout(actions)
        self.chips = DocumentChips()  # the chat's attached documents
        layout.addWidget(self.chips)
        self.image_chips = ImageChips()  # the images for the next question
        layout.addWidget(self.image_chips)
        row = QHBoxLayout()
        self.attach = QToolButton()
        self.attach.setObjectName("attach")
        self.attach.setText("Attach")
        self._paint_icons()
        self.attach.setToolTip("Attach files to this chat: text and code, Markdown, PDF, "
                               ".docx; or images for your next message (or drop or paste "
                               "them here)")
        self.attach.clicked.connect(self.choose_files)
        row.addWidget(self.attach, 0, Qt.AlignmentFlag.AlignBottom)
        self.file_dialog: QFileDialog | None = None
        self.composer = Composer()
        self.composer.files_dropped.connect(self.files_chosen)
        self.composer.image_pasted.connect(self.image_pasted)
        row.addWidget(self.composer, 1)
        # Shown only for a model that thinks, with the settings its template takes
        # (app.runtime.thinking.ThinkingSupport).
        self.think = QComboBox()
        self.think.setObjectName("think")
        self.think.setToolTip("Whether the model thinks before it answers, in this chat")
        self.think.hide()
        self.think.activated.connect(
            lambda i: self.think_changed.emit(self.think.itemData(i)))
        row.addWidget(self.think, 0, Qt.AlignmentFlag.AlignBottom)
        self.tools = ToolsButton()  # the MCP servers of this chat (app.gui.chat_controller)
        row.addWidget(self.tools, 0, Qt.AlignmentFlag.AlignBottom)
        self.send = QPushButton("Send")
        self.send.setObjectName("send")
        row.addWidget(self.send)
        layout.addLayout(row)
        self.send.clicked.connect(self._send_or_stop)
        self.composer.submitted.connect(self._submit)
        self.regenerate.clicked.connect(self.regenerate_clicked)
        self.edit.clicked.connect(self.edit_clicked)
        self.streaming = False
        self._scroll_timer = QTimer(self, singleShot=True, interval=0)
        self._scroll_timer.timeout.connect(self._scroll_to_end)
        self.set_context_use(0, 0)
        self.setAcceptDrops(True)

    def _paint_icons(self) -> None:
        self.attach.setIcon(themed_icon("paperclip", QApplication.palette().color(
            QPalette.ColorRole.WindowText)))

    def changeEvent(self, event: QEvent) -> None:
        # a theme applied after the window was built, or changed in Settings (as the rail)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._paint_icons()
        super().changeEvent(event)

    def choose_files(self) -> QFileDialog:
        """The paperclip: Qt's own file dialog (the same everywhere), without blocking; the
        files chosen are emitted by files_chosen."""
        dialog = QFileDialog(self, "Attach files to this chat", "", documents_filter())
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog)
        dialog.filesSelected.connect(lambda names: self.files_chosen.emit(
            [Path(n) for n in names]))
        self.file_dialog = dialog
        dialog.open()
        return dialog

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if local_files(event.mimeData()):
            event.acceptProposedAction()

    def dragMoveEvent(self, event) -> None:
        if local_files(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        files = local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.files_chosen.emit(files)

    def message_texts(self) -> list[QTextBrowser]:
        """The text of each shown message, for the find bar (tool cards are not searched)."""
        return [m.body for m in self.messages if isinstance(m, MessageWidget)]

    def set_think_options(self, settings: tuple[str, ...], current: str | None) -> None:
        """The Think control's choices (none: hidden) and the chat's choice (None: the
        model's default, the first). A model that always thinks shows it, disabled."""
        self.think.clear()
        for setting in settings:
            self.think.addItem(THINK_LABELS[setting], setting)
        index = self.think.findData(current) if current is not None else 0
        self.think.setCurrentIndex(max(index, 0))
        self.think.setEnabled(len(settings) > 1)
        self.think.setToolTip("This model always thinks before it answers" if
                              len(settings) == 1 else
                              "Whether the model thinks before it answers, in this chat")
        self.think.setVisible(bool(settings))

    def _submit(self) -> None:
        if not self.streaming:
            self.send_clicked.emit()

    def _send_or_stop(self) -> None:
        (self.stop_clicked if self.streaming else self.send_clicked).emit()

    def set_streaming(self, on: bool) -> None:
        self.streaming = on
        self.send.setText("Stop" if on else "Send")
        self.regenerate.setEnabled(not on and any(m.role == "assistant" for m in self.messages))
        self.edit.setEnabled(not on and any(m.role == "user" for m in self.messages))

    def clear(self) -> None:
        self.find_bar.forget()
        for m in self.messages:
            self.column.removeWidget(m)
            m.hide()
            m.deleteLater()
        self.messages = []
        self.banner.hide()
        self.set_streaming(False)

    def add_message(self, role: str, text: str, status: str = "complete",
                    stats: dict | None = None, reasoning: str = "",
                    tool_calls: tuple[ToolCall, ...] = (),
                    images: list[tuple[str, bytes]] | None = None) -> MessageWidget | ToolCard:
        widget: MessageWidget | ToolCard
        if role == "tool":  # a tool call's result, as its card
            widget = ToolCard(text, status, stats)
        else:
            widget = MessageWidget(role, text, self.dark, status, stats, reasoning, tool_calls)
            if images:
                widget.set_images(images)
        self.column.insertWidget(self.column.count() - 1, widget)
        # shown now: a layout shows a widget added to a shown window only on the event
        # loop's next pass, and a turn's later events (its thinking, its calls, its end)
        # may be handled before that
        widget.show()
        self.messages.append(widget)
        self._scroll_timer.start()
        return widget

    def remove_from(self, index: int) -> None:
        self.find_bar.forget()
        for m in self.messages[index:]:
            self.column.removeWidget(m)
            m.hide()  # at once: deleteLater waits for the event loop
            m.deleteLater()
        del self.messages[index:]

    def show_banner(self, text: str, actions: tuple[str, ...] = ("Dismiss",)) -> None:
        """A readable message above the conversation, with the actions that can help."""
        self.banner_text.setText(text)
        for action, button in self.banner_buttons.items():
            button.setVisible(action in actions)
        self.banner.setVisible(bool(text))

    def banner_message(self) -> str:
        return "" if self.banner.isHidden() else self.banner_text.text()

    def set_context_use(self, used: int, context: int) -> None:
        """`used` tokens of a `context`-token window; a context of 0 is not known yet (the
        model has not loaded, or a remote server keeps it to itself): the count alone."""
        if context <= 0:
            self.meter.setRange(0, 1)
            self.meter.setValue(0)
            self.meter.setFormat(f"context {used:,} tokens" if used else
                                 "context: known once the model loads")
            return
        self.meter.setRange(0, context)
        self.meter.setValue(min(used, context))
        self.meter.setFormat(f"context {used:,} / {context:,} tokens")

    def _scroll_to_end(self) -> None:
        bar = self.scroll.verticalScrollBar()
        bar.setValue(bar.maximum())

    def follow(self) -> None:
        self._scroll_timer.start()
