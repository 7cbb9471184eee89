"""Documents in the chat window (issue 21), driven like a user would: the paperclip and drops
attach files as chips of the chat, kept across restarts; a question goes to the model with
the documents before it (whole when they fit, else the best pieces, found with the real
all-MiniLM-L6-v2), the question stays stored as typed, and the answer shows the pieces it was
given, again when the chat is reopened and in its export. pytest-qt, offscreen Qt, the real
Qwen2.5-Coder-0.5B on the shared test Runtime (4,096 tokens of context), answers of a few
tokens. The same on a real X server is test_documents_xcb.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from app.config import Paths
from app.documents.context import DocumentContext
from app.documents.library import AttachedDocument
from app.documents.pieces import Piece
from app.export import export_file
from app.gui import build_window
from app.gui.chat_view import MessageWidget
from app.gui.document_chips import DocumentChips
from app.gui.main_window import MainWindow
from app.gui.sources_block import PIECE_CHARS, SourcesBlock, sources_of
from app.runtime import Runtime
from app.store import InstalledModel

LONG_WAIT_MS = 300_000
FRUIT = "The secret fruit of the garden is mango.\nNobody else knows it.\n"


@pytest.fixture
def home(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "home")


@pytest.fixture
def window(qtbot, runtime: Runtime, home: Paths) -> Iterator[MainWindow]:
    w = build_window(home=home, runtime=runtime)
    w.settings.temperature = 0.0  # greedy: answers are reproducible
    w.settings.max_tokens = 6
    qtbot.addWidget(w)
    w.show()
    yield w
    w.controller.stop(wait=True)
    w.library.close()


def attach(qtbot, w: MainWindow, *files: Path) -> None:
    """Through the paperclip's file dialog, as a user picks files."""
    dialog = w.chat.choose_files()
    assert dialog.isVisible()
    assert "*.pdf" in dialog.nameFilters()[0] and "*.docx" in dialog.nameFilters()[0]
    dialog.filesSelected.emit([str(f) for f in files])
    dialog.close()
    qtbot.waitUntil(lambda: w.controller.documents is not None
                    and not w.controller.documents.attaching, timeout=30_000)


def ask(qtbot, w: MainWindow, text: str) -> None:
    w.chat.composer.setPlainText(text)
    qtbot.keyClick(w.chat.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.controller.turns.request is not None or not w.controller.busy,
                    timeout=LONG_WAIT_MS)
    assert w.controller.turns.request is not None, w.chat.banner_message()


def wait_idle(qtbot, w: MainWindow) -> None:
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=LONG_WAIT_MS)


def answer_widget(w: MainWindow) -> MessageWidget:
    last = w.chat.messages[-1]
    assert isinstance(last, MessageWidget) and last.role == "assistant"
    return last


def test_a_file_that_fits_goes_in_whole_and_the_answer_shows_it_as_its_source(
        qtbot, window: MainWindow, home: Paths, runtime: Runtime, tmp_path: Path):
    notes = tmp_path / "fruit.txt"
    notes.write_text(FRUIT, encoding="utf-8")
    attach(qtbot, window, notes)
    assert window.chat.chips.names() == ["fruit.txt"]
    conv = window.controller.conversation_id
    assert conv is not None and [d.name for d in window.library.documents(conv)] == ["fruit.txt"]

    ask(qtbot, window, "What is the secret fruit? One word.")
    request = window.controller.turns.request
    question = request.messages[-1]
    assert question.role == "user"
    assert "[fruit.txt, line" in question.content and FRUIT.strip() in question.content
    assert question.content.endswith("\n\nWhat is the secret fruit? One word.")
    wait_idle(qtbot, window)
    stored = window.history.messages(conv)
    assert stored[0].content == "What is the secret fruit? One word."  # as typed
    assert stored[1].status == "complete" and "mango" in stored[1].content.lower()
    assert stored[1].stats["sources"][0].startswith("fruit.txt, line")
    used = window.library.used_by(stored[1].id)
    assert used is not None and used.whole and used.pieces[0].text.strip() == FRUIT.strip()
    block = answer_widget(window).sources
    assert block.isVisible() and block.toggle.text().startswith("Sources: fruit.txt, line")
    assert not block.pieces.isVisible()
    block.toggle.click()
    assert block.pieces.isVisible() and "mango" in block.pieces.text()

    md = tmp_path / "fruit.md"
    export_file(window.history, md, [conv])
    assert "Sources:\n\n- fruit.txt, line" in md.read_text(encoding="utf-8")

    # a restart: the chip and the sources are there again, from documents.db
    window.close()
    again = build_window(home=home, runtime=runtime)
    qtbot.addWidget(again)
    try:
        again.controller.open(conv)
        assert again.chat.chips.names() == ["fruit.txt"]
        assert answer_widget(again).sources.toggle.text().startswith("Sources: fruit.txt")
        # detaching: the chip goes, and the next question goes without the file
        again.chat.chips.chips[0].remove.click()
        assert again.chat.chips.names() == [] and again.library.documents(conv) == []
    finally:
        again.library.close()


def test_a_file_that_cannot_be_read_says_why_and_attaches_nothing(
        qtbot, window: MainWindow, tmp_path: Path):
    broken = tmp_path / "scan.pdf"
    broken.write_bytes(b"%PDF-1.7\nthis is not a PDF body\n")
    good = tmp_path / "notes.md"
    good.write_text("# Notes\nNothing here.\n", encoding="utf-8")
    attach(qtbot, window, broken, good)
    banner = window.chat.banner_message()
    assert banner.startswith("Not attached: scan.pdf: "), banner
    assert window.chat.chips.names() == ["notes.md"]  # the readable one is attached
    conv = window.controller.conversation_id
    assert [d.name for d in window.library.documents(conv)] == ["notes.md"]
    assert "Attached 1 file(s)" in window.statusBar().currentMessage()


def test_files_dropped_on_the_message_box_are_attached_not_pasted(
        qtbot, window: MainWindow, tmp_path: Path):
    code = tmp_path / "add.py"
    code.write_text("def add(a, b):\n    return a + b\n", encoding="utf-8")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(code))])
    target = window.chat.composer.viewport()
    # as a drag from a file manager: it enters (and is accepted), then drops
    enter = QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, mime,
                            Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime,
                      Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, drop)
    qtbot.waitUntil(lambda: window.chat.chips.names() == ["add.py"], timeout=30_000)
    assert window.chat.composer.toPlainText() == ""


def test_documents_too_long_for_the_context_give_the_best_pieces_with_their_citations(
        qtbot, window: MainWindow, runtime: Runtime, qwen: InstalledModel,
        minilm: InstalledModel, tmp_path: Path):
    window.settings.context = 1024  # a small context: a short document overflows it
    # ~1,400 tokens of filler around one fact: more than the 1,024-token context
    filler = "\n".join(f"Line {i}: the weather report says clouds and light wind."
                       for i in range(50))
    report = tmp_path / "report.txt"
    report.write_text(filler + "\nThe launch code of the rocket is 7319.\n" + filler,
                      encoding="utf-8")
    attach(qtbot, window, report)
    try:
        ask(qtbot, window, "What is the launch code of the rocket?")
        wait_idle(qtbot, window)
        assert {lm.model.ref: lm.plan.context for lm in runtime.loaded()}[qwen.ref] == 1024
        conv = window.controller.conversation_id
        answer = window.history.messages(conv)[-1]
        assert answer.status == "complete", window.chat.banner_message()
        used = window.library.used_by(answer.id)
        assert used is not None and not used.whole and len(used.pieces) >= 1
        assert any("7319" in p.text for p in used.pieces)  # the piece with the fact
        assert used.tokens <= 1024 - 6
        block = answer_widget(window).sources
        assert block.isVisible() and block.sources == sources_of(used)
        assert all(s.citation.startswith("report.txt, line") for s in block.sources)

        # a regenerated answer is given the same pieces (no new search)
        qtbot.mouseClick(window.chat.regenerate, Qt.MouseButton.LeftButton)
        wait_idle(qtbot, window)
        again = window.history.messages(conv)[-1]
        assert again.id != answer.id and window.library.used_by(again.id).pieces == used.pieces
    finally:  # the shared Runtime as it was: Qwen at 4,096 tokens, alone
        runtime.unload(minilm.ref)
        runtime.load(qwen.ref, context=4096)


def test_without_the_embedding_model_a_long_document_offers_its_download(
        qtbot, window: MainWindow, home: Paths, tmp_path: Path):
    # a model name the registry does not know: the download fails at once, offline
    home.config_file.write_text('[documents]\nembedding_model = "no-such-embedder"\n',
                                encoding="utf-8")
    report = tmp_path / "report.txt"
    report.write_text("\n".join(f"Line {i}: clouds and light wind over the harbour."
                                for i in range(600)), encoding="utf-8")
    attach(qtbot, window, report)
    window.chat.composer.setPlainText("What is the weather?")
    qtbot.keyClick(window.chat.composer, Qt.Key.Key_Return)
    wait_idle(qtbot, window)
    conv = window.controller.conversation_id
    assert [m.role for m in window.history.messages(conv)] == ["user"]  # not answered
    banner = window.chat.banner_message()
    assert "needs the embedding model no-such-embedder, which is not installed" in banner
    button = window.chat.banner_buttons["Download the embedding model"]
    assert button.isVisible() and window.chat.banner_buttons["Retry"].isVisible()
    button.click()
    assert window.pages.currentWidget() is window.hub  # the download, on the Models page
    row = window.hub.rows["no-such-embedder"]
    qtbot.waitUntil(lambda: row.state == "failed", timeout=30_000)
    assert "no-such-embedder" in row.detail.text()


def test_stop_while_the_documents_are_chosen_leaves_the_question_unanswered(
        qtbot, window: MainWindow, tmp_path: Path):
    notes = tmp_path / "fruit.txt"
    notes.write_text(FRUIT, encoding="utf-8")
    attach(qtbot, window, notes)
    window.chat.composer.setPlainText("What is the secret fruit?")
    qtbot.keyClick(window.chat.composer, Qt.Key.Key_Return)
    # choosing the documents comes first, off the UI thread: Stop is offered at once
    assert window.controller.busy and window.controller.turns.request is None
    assert window.chat.send.text() == "Stop"
    qtbot.mouseClick(window.chat.send, Qt.MouseButton.LeftButton)
    assert not window.controller.busy and window.chat.send.text() == "Send"
    qtbot.wait(1000)  # the documents' answer, when it comes, starts nothing
    conv = window.controller.conversation_id
    assert window.controller.task is None and window.controller.turns.request is None
    assert [m.role for m in window.history.messages(conv)] == ["user"]


def test_an_imported_answer_shows_the_citations_its_export_kept(
        qtbot, window: MainWindow, tmp_path: Path):
    export = {"format": "ember.conversations", "version": 1, "conversations": [{
        "title": "Fruit", "model": None, "system_prompt": "", "created_at": 1.0,
        "updated_at": 1.0, "messages": [
            {"id": 1, "parent": None, "role": "user", "content": "What fruit?",
             "status": "complete", "created_at": 1.0},
            {"id": 2, "parent": 1, "role": "assistant", "content": "Mango.",
             "status": "complete", "created_at": 2.0,
             "stats": {"completion_tokens": 2, "sources": ["fruit.txt, lines 1-2"]}}]}]}
    path = tmp_path / "fruit.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    [conv] = window.import_from(str(path))
    assert window.controller.conversation_id == conv
    block = answer_widget(window).sources
    assert block.toggle.text() == "Sources: fruit.txt, lines 1-2"
    block.toggle.click()
    assert block.pieces.text() == "— fruit.txt, lines 1-2"  # the text stayed in documents.db


def test_the_chips_show_each_document_and_detach_by_id(qtbot):
    chips = DocumentChips()
    qtbot.addWidget(chips)
    chips.show()
    docs = [AttachedDocument(4, 1, "report.pdf", "pdf", 12, 30_000, 0.0),
            AttachedDocument(5, 1, "main.py", "code", None, 1_234, 0.0)]
    chips.set_documents(docs)
    assert chips.isVisible()
    assert [c.label.text() for c in chips.chips] == ["report.pdf · 12 pages",
                                                     "main.py · 1,234 characters"]
    with qtbot.waitSignal(chips.detach_requested) as detached:
        chips.chips[1].remove.click()
    assert detached.args == [5]
    chips.set_documents([])
    assert not chips.isVisible() and chips.names() == []


def test_the_sources_block_folds_and_shows_long_pieces_shortened(qtbot):
    long_text = "x" * (PIECE_CHARS + 50)
    context = DocumentContext(False, (Piece("report.pdf", long_text, 12, 1, 40),
                                      Piece("main.py", "def f(): pass", None, 10, 42)),
                              "…", 100)
    block = SourcesBlock()
    qtbot.addWidget(block)
    block.show()
    block.set_sources(sources_of(context))
    assert block.toggle.text() == "Sources: report.pdf, page 12; main.py, lines 10-42"
    assert not block.pieces.isVisible()
    block.toggle.click()
    assert block.pieces.isVisible()
    text = block.pieces.text()
    assert "— report.pdf, page 12\n" in text and "… (50 more characters)" in text
    assert "— main.py, lines 10-42\ndef f(): pass" in text
    block.set_sources([])
    assert not block.isVisible()
