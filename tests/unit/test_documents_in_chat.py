"""The window's side of documents in the chat, without a model: where the documents' block
goes in the request, the token budget left for it, and the sources an answer keeps through
Markdown and JSON export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.chat.documents import MIN_DOCUMENT_TOKENS, NoRoomError, budget_for
from app.chat.request import with_documents
from app.export import export_file, import_file
from app.gui.sources_block import Source, citations_of, summary
from app.history import History
from backends.base import Message

BLOCK = "Answer from these documents.\n\n[notes.txt, lines 1-2]\nThe fruit is mango."


def test_the_documents_go_before_the_last_question_only():
    history = [Message("user", "Hi."), Message("assistant", "Hello."),
               Message("user", "What fruit?")]
    sent = with_documents(history, BLOCK)
    assert sent[:2] == history[:2]
    assert sent[2] == Message("user", BLOCK + "\n\nWhat fruit?")
    assert history[2].content == "What fruit?"  # the caller's list is not changed


def test_after_a_tool_result_the_documents_stay_with_the_question():
    history = [Message("user", "What fruit?"), Message("assistant", ""),
               Message("tool", "42", tool_call_id="c1", name="lookup")]
    sent = with_documents(history, BLOCK)
    assert sent[0].content.endswith("\n\nWhat fruit?") and sent[1:] == history[1:]


def test_no_question_or_no_block_leaves_the_conversation_as_it_is():
    only_answer = [Message("assistant", "Hello.")]
    assert with_documents(only_answer, BLOCK) == only_answer
    question = [Message("user", "Hi.")]
    assert with_documents(question, "  ") == question


def test_the_budget_is_the_context_less_the_conversation_and_the_room_to_answer():
    budget = budget_for(4096, 300, 512)
    assert (budget.answer, budget.documents) == (512, 4096 - 300 - 512)
    # an answer allowed the whole context keeps a quarter of it, not all of it
    assert budget_for(4096, 300, 4096).answer == 1024


def test_a_full_conversation_leaves_no_room_and_says_what_to_do():
    with pytest.raises(NoRoomError) as e:
        budget_for(2048, 2048 - 512 - MIN_DOCUMENT_TOKENS + 1, 512)
    assert "no room for the documents" in str(e.value)
    assert "raise the context length in Settings" in str(e.value)


def test_the_sources_line_names_every_citation_and_is_shortened_when_long():
    assert summary([Source("a.pdf, page 1", ""), Source("b.py, lines 1-9", "x")]) == \
        "Sources: a.pdf, page 1; b.py, lines 1-9"
    long = summary([Source(f"report-{i}.pdf, page {i}", "") for i in range(30)])
    assert len(long) <= 160 and long.endswith("…")
    assert citations_of({"sources": ["a.pdf, page 1", 7]}) == [Source("a.pdf, page 1", "")]
    assert citations_of(None) == []


def test_an_answers_sources_are_listed_in_markdown_and_kept_through_json(tmp_path: Path):
    history = History(tmp_path / "history.db")
    conv = history.create(title="Fruit")
    history.add_message(conv.id, "user", "What fruit?")
    answer = history.add_message(conv.id, "assistant", "Mango.")
    stats = {"completion_tokens": 2, "sources": ["notes.txt, lines 1-2", "a.pdf, page 3"]}
    history.update_message(answer.id, "Mango.", "complete", stats)
    md = tmp_path / "fruit.md"
    export_file(history, md, [conv.id])
    assert "Mango.\n\nSources:\n\n- notes.txt, lines 1-2\n- a.pdf, page 3" in md.read_text(
        encoding="utf-8")
    out = tmp_path / "fruit.json"
    export_file(history, out, [conv.id])
    assert json.loads(out.read_text())["conversations"][0]["messages"][1]["stats"][
        "sources"] == stats["sources"]
    [new] = import_file(history, out)
    assert history.messages(new)[1].stats["sources"] == stats["sources"]
    history.close()
