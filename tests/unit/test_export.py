"""Export and import: Markdown to read, JSON that imports back losslessly, and a clear error
(with nothing changed) for a file that is not a good Ember export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.export import (
    FORMAT,
    ImportFormatError,
    export_file,
    fence,
    from_json,
    import_file,
    to_json,
    to_markdown,
    trees,
)
from app.history import STATUSES, History
from backends.base import ToolCall

CALL = ToolCall("call_1", "get_weather", '{"city": "Paris"}')


@pytest.fixture
def history(tmp_path: Path) -> History:
    return History(tmp_path / "history.db")


def branched(h: History) -> int:
    """A conversation with an edited question, a regenerated answer, thinking, a tool call
    and its result, a stopped answer and every setting set."""
    conv = h.create(model="qwen2.5-coder-0.5b-instruct:Q4_K_M", title="Weather ```",
                    system_prompt="You are terse.\nVery.")
    h.set_thinking(conv.id, "high")
    h.set_preset(conv.id, "Code reviewer")
    q = h.add_message(conv.id, "user", "Weather in Paris? 🔥 日本語 ```not a fence```")
    a1 = h.add_message(conv.id, "assistant", "", reasoning="Need a tool.", tool_calls=(CALL,),
                  stats={"prompt_tokens": 40, "completion_tokens": 12, "ttft_s": 0.25},
                  model="lab/think")
    h.add_message(conv.id, "tool", "18°C", tool_call_id="call_1", tool_name="get_weather")
    h.add_message(conv.id, "assistant", "It is 18°C.", reasoning="Easy.")
    h.add_message(conv.id, "assistant", "Sunny, 18°C.", parent_id=q.id, status="stopped")
    h.add_message(conv.id, "user", "Paris, France?", parent_id=None)
    h.add_message(conv.id, "assistant", "", status="interrupted")
    h.switch_to(q.id)
    h.switch_to(a1.id)
    return conv.id


def normalized(export: str) -> list[dict]:
    """The export without its ids (renumbered by position) and its time of export."""
    out = []
    for conv in json.loads(export)["conversations"]:
        index = {m["id"]: i for i, m in enumerate(conv["messages"])}
        conv = {**conv, "shown_root": index.get(conv["shown_root"])}
        conv["messages"] = [{**m, "id": index[m["id"]], "parent": index.get(m["parent"]),
                             "shown_child": index.get(m["shown_child"])}
                            for m in conv["messages"]]
        out.append(conv)
    return out


def test_json_imports_back_with_every_branch_setting_and_time(history: History,
                                                              tmp_path: Path):
    conv_id = branched(history)
    path = tmp_path / "out.json"
    assert export_file(history, path, [conv_id]) == 1
    other = History(tmp_path / "other.db")
    [new_id] = import_file(other, path)
    again = to_json(trees(other, [new_id]))
    assert normalized(again) == normalized(path.read_text(encoding="utf-8"))
    old, new = history.get(conv_id), other.get(new_id)
    assert (new.title, new.model, new.system_prompt, new.thinking, new.preset,
            new.created_at, new.updated_at) == (old.title, old.model, old.system_prompt,
                                                old.thinking, old.preset, old.created_at,
                                                old.updated_at)
    assert [m.content for m in other.messages(new_id)] == [
        m.content for m in history.messages(conv_id)]
    assert len(other.all_messages(new_id)) == 7
    shown = other.messages(new_id)
    assert shown[1].tool_calls == (CALL,) and shown[1].reasoning == "Need a tool."
    assert other.versions(new_id)[shown[0].id].count == 2  # the edited first question


@st.composite
def conversations(draw) -> list[dict]:
    """Random trees: each message below a random earlier one (or a new first turn), with
    random text, status, thinking and calls, and random shown choices."""
    text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
    n = draw(st.integers(0, 12))
    messages = []
    for i in range(n):
        messages.append({
            "parent": draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None,
            "role": draw(st.sampled_from(("user", "assistant", "tool", "system"))),
            "content": draw(text), "status": draw(st.sampled_from(STATUSES)),
            "reasoning": draw(text),
            "calls": draw(st.lists(st.tuples(text, text, text), max_size=2)),
            "stats": draw(st.one_of(st.none(), st.dictionaries(
                st.sampled_from(("prompt_tokens", "ttft_s")),
                st.one_of(st.integers(0, 10**6), st.floats(0, 100)), min_size=1)))})
    switches = draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=4)) if n else []
    return [{"title": draw(text.filter(lambda t: t.strip() != "" and t == " ".join(t.split())
                                       and len(t) <= 200)),
             "system": draw(text), "messages": messages, "switches": switches}]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=conversations())
def test_any_tree_survives_export_then_import_unchanged(tmp_path: Path, spec: list[dict]):
    path = tmp_path / f"h{abs(hash(json.dumps(spec, sort_keys=True)))}.db"
    h = History(path)
    try:
        for conv_spec in spec:
            conv = h.create(title=conv_spec["title"], system_prompt=conv_spec["system"])
            ids: list[int] = []
            for m in conv_spec["messages"]:
                parent = None if m["parent"] is None else ids[m["parent"]]
                stored = h.add_message(conv.id, m["role"], m["content"], m["status"],
                                       m["stats"], reasoning=m["reasoning"],
                                       tool_calls=tuple(ToolCall(*c) for c in m["calls"]),
                                       parent_id=parent)
                ids.append(stored.id)
            for i in conv_spec["switches"]:
                h.switch_to(ids[i])
        exported = to_json(trees(h))
        new_ids = h.import_trees([(t.conversation, list(t.messages))
                                  for t in from_json(exported)])
        again = to_json(trees(h, new_ids))
        assert normalized(again) == normalized(exported)
        for old, new in zip(trees(h, [c.id for c in h.conversations()][len(new_ids):]),
                            trees(h, new_ids), strict=True):
            assert [m.content for m in h.messages(new.conversation.id)] == [
                m.content for m in h.messages(old.conversation.id)]
    finally:
        h.close()
        path.unlink()


def test_markdown_shows_the_shown_path_with_thinking_folded_and_calls_fenced(
        history: History):
    conv_id = branched(history)
    text = to_markdown(trees(history, [conv_id]))
    assert text.startswith("# Weather ```\n\n- Model: `qwen2.5-coder-0.5b-instruct:Q4_K_M`\n"
                           "- Preset: Code reviewer\n")
    assert "> You are terse.\n> Very." in text
    assert "### You (version 1 of 2)\n\nWeather in Paris? 🔥 日本語 ```not a fence```" in text
    assert ("### Ember (version 1 of 2)\n\n<details>\n<summary>Thinking</summary>\n\n"
            "Need a tool.\n\n</details>") in text
    assert 'Tool call `get_weather` (id `call_1`):\n\n```json\n{\n  "city": "Paris"\n}\n```' \
        in text
    assert "### Tool result (get_weather)\n\n```\n18°C\n```" in text
    assert "It is 18°C." in text
    assert "Sunny" not in text and "Paris, France?" not in text  # other versions: JSON only


def test_a_fence_is_longer_than_any_backticks_inside():
    assert fence("a ``` b", "py") == "````py\na ``` b\n````"
    assert fence("plain") == "```\nplain\n```"


def test_export_all_writes_every_conversation_that_is_not_deleted(history: History,
                                                                  tmp_path: Path):
    branched(history)
    gone = history.create(title="Deleted")
    history.delete(gone.id)
    history.create(title="Empty one")
    assert export_file(history, tmp_path / "all.md") == 2
    text = (tmp_path / "all.md").read_text(encoding="utf-8")
    assert "# Empty one" in text and "# Weather" in text and "Deleted" not in text
    assert "\n---\n" in text


GOOD = {"title": "t", "system_prompt": "", "created_at": 1.0, "updated_at": 2.0,
        "shown_root": 1, "messages": [
            {"id": 1, "parent": None, "shown_child": None, "role": "user", "content": "hi",
             "status": "complete", "stats": None, "model": None, "created_at": 1.5,
             "reasoning": "", "tool_calls": [], "tool_call_id": None, "tool_name": None}]}


def export_of(*convs: dict, **top: object) -> str:
    return json.dumps({"format": FORMAT, "version": 1, "conversations": list(convs), **top})


def with_message(**change: object) -> dict:
    return {**GOOD, "messages": [{**GOOD["messages"][0], **change}]}


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", r"is not JSON: Expecting property name"),
    ('[{"title": "ChatGPT", "mapping": {}}]', r"is not an Ember conversations export \(it is "
                                              r"a list without a 'format'"),
    ('{"format": "lmstudio.chat"}', r"not an Ember conversations export \('format' is "
                                    r"'lmstudio.chat'"),
    (export_of(version=2), r"written by a newer Ember \(format version 2; this one reads 1\)"),
    (json.dumps({"format": FORMAT, "version": 1}), r"'conversations' must be a list, got null"),
    (export_of(GOOD, with_message(role="bot")),
     r"conversations\[1\]\.messages\[0\]\.role: expected one of system, user, assistant, "
     r"tool, got 'bot'"),
    (export_of(with_message(parent=7)),
     r"conversations\[0\]\.messages\[0\]\.parent: 7 is not a message listed before"),
    (export_of(with_message(shown_child=1)),
     r"messages\[0\]\.shown_child: 1 is not a child of message 1"),
    (export_of({**GOOD, "shown_root": 5}), r"conversations\[0\]\.shown_root: 5 is not a first"),
    (export_of(with_message(content=None)),
     r"messages\[0\]\.content: expected str, got null"),
    (export_of(with_message(created_at=True)),
     r"messages\[0\]\.created_at: expected float, got true/false"),
    (export_of(with_message(tool_calls=[{"id": "c", "name": "f"}])),
     r"messages\[0\]\.tool_calls\[0\]: 'arguments' is missing"),
    (export_of({k: v for k, v in GOOD.items() if k != "title"}),
     r"conversations\[0\]: 'title' is missing"),
    (export_of({**GOOD, "thinking": "max"}),
     r"conversations\[0\]\.thinking: expected one of off, on, low, medium, high, got 'max'"),
])
def test_a_malformed_or_foreign_file_says_what_is_wrong_and_imports_nothing(
        history: History, tmp_path: Path, text: str, message: str):
    branched(history)
    before = to_json(trees(history))
    path = tmp_path / "in.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ImportFormatError, match=message):
        import_file(history, path)
    assert normalized(to_json(trees(history))) == normalized(before)
    assert len(history.conversations()) == 1


def test_a_file_that_cannot_be_read_is_a_clear_error(history: History, tmp_path: Path):
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ImportFormatError, match="cannot read .*bin.json"):
        import_file(history, tmp_path / "bin.json")
    with pytest.raises(ImportFormatError, match="cannot read .*missing.json"):
        import_file(history, tmp_path / "missing.json")
