"""A question's images in history.db: files in the data folder, content-addressed, kept by
the migration from schema 3, shared between conversations, exported (Markdown with the files
beside it, JSON with the bytes) and imported back."""

from __future__ import annotations

import base64
import io
import json
import sqlite3
import time
from pathlib import Path

import pytest
from PIL import Image

from app.export import ImportFormatError, export_file, from_json, import_file
from app.history import MIGRATIONS, SCHEMA_V1, History, StoredMedia


def png(color: tuple[int, int, int], size: tuple[int, int] = (8, 6)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


RED, BLUE = png((255, 0, 0)), png((0, 0, 255))


def schema_3_file(path: Path) -> None:
    """history.db as Ember wrote it before media (schema 3), with a conversation in it."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_V1)
    for step in (1, 2):
        for statement in MIGRATIONS[step]:
            db.execute(statement)
    db.execute("PRAGMA user_version=3")
    db.execute("INSERT INTO conversations(id, title, model, system_prompt, created_at,"
               " updated_at, shown_root_id) VALUES (1, 'Old chat', 'm', 'Be brief.', 1, 2, 1)")
    db.execute("INSERT INTO messages(id, conversation_id, role, content, created_at,"
               " parent_id, shown_child_id) VALUES (1, 1, 'user', 'Hi', 1, NULL, 2)")
    db.execute("INSERT INTO messages(id, conversation_id, role, content, created_at,"
               " parent_id, reasoning) VALUES (2, 1, 'assistant', 'Hello', 2, 1, 'hm')")
    db.commit()
    db.close()


def test_the_migration_keeps_every_conversation_and_adds_media(tmp_path):
    path = tmp_path / "history.db"
    schema_3_file(path)
    history = History(path)
    assert [(c.id, c.title, c.system_prompt) for c in history.conversations()] == [
        (1, "Old chat", "Be brief.")]
    assert [(m.role, m.content, m.reasoning, m.media) for m in history.messages(1)] == [
        ("user", "Hi", "", ()), ("assistant", "Hello", "hm", ())]
    # the migrated file takes images like a new one
    red = history.store_media(RED, "image", "png")
    q = history.add_message(1, "user", "What is this?", media=(red,))
    assert history.messages(1)[-1].media == (red,) == q.media
    history.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    reopened = History(path)
    assert reopened.messages(1)[-1].media == (red,)
    reopened.close()


def test_the_same_screenshot_twice_is_one_file_written_whole(tmp_path):
    history = History(tmp_path / "history.db")
    first = history.store_media(RED, "image", "png")
    again = history.store_media(RED, "image", "png")
    assert first == again and first.name.endswith(".png") and len(first.sha256) == 64
    files = sorted(p.name for p in (tmp_path / "media").iterdir())
    assert files == [first.name]  # no temporary file left beside it
    assert history.read_media(first) == RED
    history.close()


def test_a_crafted_media_name_never_reaches_the_disk(tmp_path):
    history = History(tmp_path / "history.db")
    conv = history.create()
    with pytest.raises(Exception, match="not a stored media file"):
        history.add_message(conv.id, "user", "x",
                            media=(StoredMedia("image", "../../etc/passwd", "png"),))
    with pytest.raises(Exception, match="not a stored media file"):
        history.media_path(StoredMedia("image", "a" * 64, "p/ng"))
    history.close()


def test_deleting_a_conversation_keeps_a_file_another_one_holds(tmp_path, monkeypatch):
    monkeypatch.setattr("app.history.UNUSED_MEDIA_GRACE_S", 0.0)
    history = History(tmp_path / "history.db")
    one, two = history.create(), history.create()
    red, blue = history.store_media(RED, "image", "png"), history.store_media(BLUE, "image",
                                                                               "png")
    history.add_message(one.id, "user", "a", media=(red, blue))
    history.add_message(two.id, "user", "b", media=(red,))
    time.sleep(0.01)
    history.delete(one.id)
    assert history.media_path(blue).exists()  # deleted is undoable: its files stay
    assert history.purge_deleted() == 1
    assert history.media_path(red).exists()  # still held by the other conversation
    assert not history.media_path(blue).exists()
    assert history.messages(two.id)[0].media == (red,)
    history.close()


def conversation_with_images(history: History) -> int:
    conv = history.create(title="Pictures")
    red, blue = history.store_media(RED, "image", "png"), history.store_media(BLUE, "image",
                                                                               "png")
    history.add_message(conv.id, "user", "Which colours?", media=(red, blue))
    history.add_message(conv.id, "assistant", "Red and blue.")
    return conv.id


def test_markdown_export_copies_the_images_beside_it_with_relative_links(tmp_path):
    history = History(tmp_path / "data" / "history.db")
    conv_id = conversation_with_images(history)
    out = tmp_path / "out" / "chat.md"
    out.parent.mkdir()
    assert export_file(history, out, [conv_id]) == 1
    text = out.read_text()
    red = history.messages(conv_id)[0].media[0]
    assert f"![image 1](chat-media/{red.name})" in text
    links = [line.split("(")[1].rstrip(")") for line in text.splitlines()
             if line.startswith("![image")]
    assert [(out.parent / link).read_bytes() for link in links] == [RED, BLUE]
    history.close()


def test_json_export_carries_the_bytes_and_imports_them_into_another_data_folder(tmp_path):
    history = History(tmp_path / "a" / "history.db")
    conv_id = conversation_with_images(history)
    out = tmp_path / "chats.json"
    export_file(history, out, [conv_id])
    media = json.loads(out.read_text())["conversations"][0]["messages"][0]["media"]
    assert [(m["kind"], m["type"], base64.b64decode(m["data"])) for m in media] == [
        ("image", "png", RED), ("image", "png", BLUE)]
    other = History(tmp_path / "b" / "history.db")
    [new_id] = import_file(other, out)
    question = other.messages(new_id)[0]
    assert [other.read_media(m) for m in question.media] == [RED, BLUE]
    history.close()
    other.close()


def test_an_import_whose_image_does_not_match_its_hash_is_refused(tmp_path):
    history = History(tmp_path / "history.db")
    conv_id = conversation_with_images(history)
    out = tmp_path / "chats.json"
    export_file(history, out, [conv_id])
    data = json.loads(out.read_text())
    data["conversations"][0]["messages"][0]["media"][1]["data"] = base64.b64encode(
        RED).decode()
    with pytest.raises(ImportFormatError,
                       match=r"messages\[0\]\.media\[1\]\.data: its bytes do not match"):
        from_json(json.dumps(data))
    history.close()
