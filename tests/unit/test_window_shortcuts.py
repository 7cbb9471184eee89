"""The window's shortcut table and the model switcher's filter (no window, no model)."""

from __future__ import annotations

from PySide6.QtGui import QKeySequence

from app.gui.model_choices import ModelChoice, matches, remote_choice
from app.gui.nav_rail import PAGES
from app.gui.shortcuts import ALL, BOUND, shortcuts_html


def test_every_bound_key_is_distinct_and_listed():
    keys = [QKeySequence(s.keys).toString() for s in BOUND]
    assert len(keys) == len(set(keys)) and all(keys)
    assert {"Ctrl+K", "Ctrl+N", "Ctrl+F", "Ctrl+E"} <= set(keys)
    assert {p.shortcut for p in PAGES} <= {s.keys for s in BOUND}  # every page has its key
    html = shortcuts_html()
    assert all(f"<b>{s.keys}</b>" in html for s in ALL)


def test_the_switcher_filter_needs_every_word_in_any_order_and_any_case():
    choice = ModelChoice("qwen2.5-coder-1.5b-instruct:Q4_K_M", "llamacpp", "CPU")
    assert choice.text == "qwen2.5-coder-1.5b-instruct:Q4_K_M  ·  llamacpp  ·  CPU"
    assert matches(choice, "1.5B coder") and matches(choice, "") and matches(choice, "cpu")
    assert not matches(choice, "coder 0.5b")
    remote = remote_choice("lab/llama-3-8b")
    assert remote.text == "lab/llama-3-8b  ·  remote" and matches(remote, "lab remote")
