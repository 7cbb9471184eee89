"""`ember history list/export/import` as a user runs them (a subprocess, no model)."""

from __future__ import annotations

import json
from pathlib import Path

from app.history import History
from tests.support.cli import ember


def test_export_then_import_in_another_home_keeps_every_version(tmp_path: Path):
    first, second = tmp_path / "one", tmp_path / "two"
    h = History(first / "history.db")
    conv = h.create(title="Primes")
    q = h.add_message(conv.id, "user", "A prime above 10?")
    h.add_message(conv.id, "assistant", "11", reasoning="10 is not prime.")
    h.add_message(conv.id, "assistant", "13", parent_id=q.id)
    h.close()

    listed = ember("history", "list", env={"EMBER_HOME": str(first)})
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [str(conv.id), "3", "messages", "Primes"]
    md = ember("history", "export", env={"EMBER_HOME": str(first)})
    assert "# Primes" in md.stdout and "### Ember (version 2 of 2)\n\n13" in md.stdout
    out = tmp_path / "primes.json"
    r = ember("history", "export", str(conv.id), "-o", str(out),
              env={"EMBER_HOME": str(first)})
    assert r.returncode == 0 and "exported 1 conversation(s)" in r.stderr
    assert json.loads(out.read_text(encoding="utf-8"))["format"] == "ember.conversations"

    r = ember("history", "import", str(out), env={"EMBER_HOME": str(second)})
    assert r.returncode == 0, r.stderr
    again = History(second / "history.db")
    [imported] = again.conversations()
    assert [m.content for m in again.messages(imported.id)] == ["A prime above 10?", "13"]
    assert sorted(m.content for m in again.all_messages(imported.id)) == [
        "11", "13", "A prime above 10?"]


def test_importing_a_foreign_file_fails_clearly_and_adds_nothing(tmp_path: Path):
    bad = tmp_path / "chatgpt.json"
    bad.write_text('[{"title": "x", "mapping": {}}]', encoding="utf-8")
    r = ember("history", "import", str(bad), env={"EMBER_HOME": str(tmp_path / "home")})
    assert r.returncode == 1
    assert "is not an Ember conversations export" in r.stderr and "Traceback" not in r.stderr
    assert History(tmp_path / "home" / "history.db").conversations() == []
