"""Conversations out of and back into history.db: Markdown to read and share, JSON to move.

JSON ("ember.conversations", version 1) carries everything history.db knows of a
conversation: its settings (title, model, system prompt, Think setting, preset, times), every
version of every turn (the whole tree, each message's parent and shown child), thinking, tool
calls and results, statuses and stats. Importing it back gives the same conversations under
new ids: exporting those again gives the same file, less the ids.

An answer made with the chat's documents keeps the citations of the pieces it was given in
its stats (`stats["sources"]`): Markdown lists them under the answer, JSON carries them both
ways. The pieces' text and the documents themselves stay in documents.db (not exported).

An import reads and checks the whole file before it writes anything, and then writes it in one
transaction: a file that is not Ember's, or is damaged anywhere, is an ImportFormatError that
says where (`conversations[0].messages[3].role: ...`) and changes nothing.

Markdown shows the shown path of each conversation, as the window does: thinking in a folded
`<details>` block, tool calls and tool results as fenced blocks.

A question's images (and audio): in JSON, each message's optional "media" list holds them
whole ({"kind", "type", "sha256", "data": base64 of the bytes as given}), checked against
their hash on import; Markdown links them, and export_file copies the files into a folder
beside the .md (`<name>-media/`), so the links are relative and the folder travels with it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from app import __version__
from app.history import (
    MEDIA_KINDS,
    STATUSES,
    THINKING_SETTINGS,
    Conversation,
    History,
    StoredMedia,
    StoredMessage,
)
from app.history_tree import shown_path, versions
from backends.base import ToolCall
from backends.errors import EmberError

FORMAT = "ember.conversations"
VERSION = 1
ROLES = ("system", "user", "assistant", "tool")
ROLE_HEADINGS = {"user": "You", "assistant": "Ember", "system": "System", "tool": "Tool result"}


class ImportFormatError(EmberError):
    pass


@dataclass(frozen=True)
class ConversationTree:
    """One conversation and all its messages (ids as in the source they came from)."""
    conversation: Conversation
    messages: tuple[StoredMessage, ...]
    blobs: dict[str, bytes] = field(default_factory=dict)  # read from JSON: media by name


ReadMedia = Callable[[StoredMedia], bytes]  # History.read_media
MediaLink = Callable[[StoredMedia], str]  # where Markdown links a file


def trees(history: History, ids: list[int] | None = None) -> list[ConversationTree]:
    """The conversations `ids` (None: all that are not deleted, newest first)."""
    convs = [history.get(i) for i in ids] if ids is not None else history.conversations()
    return [ConversationTree(c, tuple(history.all_messages(c.id))) for c in convs]


# -- JSON ---------------------------------------------------------------------------------

def _media_json(media: tuple[StoredMedia, ...], read: ReadMedia) -> list[dict]:
    return [{"kind": x.kind, "type": x.ext, "sha256": x.sha256,
             "data": base64.b64encode(read(x)).decode("ascii")} for x in media]


def _message_json(m: StoredMessage, read: ReadMedia | None) -> dict:
    extra = {"media": _media_json(m.media, read)} if m.media and read is not None else {}
    return extra | {"id": m.id, "parent": m.parent_id, "shown_child": m.shown_child_id,
            "role": m.role, "content": m.content, "status": m.status, "stats": m.stats,
            "model": m.model, "created_at": m.created_at, "reasoning": m.reasoning,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                           for c in m.tool_calls],
            "tool_call_id": m.tool_call_id, "tool_name": m.tool_name}


def to_json(items: list[ConversationTree], read: ReadMedia | None = None) -> str:
    """The export; each question's media with their bytes (`read`; None: left out)."""
    out = {"format": FORMAT, "version": VERSION, "exported_by": f"Ember {__version__}",
           "exported_at": time.time(), "conversations": [
               {"title": t.conversation.title, "model": t.conversation.model,
                "system_prompt": t.conversation.system_prompt,
                "thinking": t.conversation.thinking, "preset": t.conversation.preset,
                "created_at": t.conversation.created_at,
                "updated_at": t.conversation.updated_at,
                "shown_root": t.conversation.shown_root_id,
                "messages": [_message_json(m, read) for m in t.messages]}
               for t in items]}
    return json.dumps(out, ensure_ascii=False, indent=1)


class _Reader:
    """Typed access to one JSON object, each error naming where it is."""

    def __init__(self, obj: object, where: str) -> None:
        if not isinstance(obj, dict):
            raise ImportFormatError(f"{where}: expected an object, got {_kind(obj)}")
        self.obj, self.where = obj, where

    def get(self, key: str, types: tuple[type, ...], optional: bool = False) -> Any:
        if key not in self.obj:
            if optional:
                return None
            raise ImportFormatError(f"{self.where}: '{key}' is missing")
        value = self.obj[key]
        if value is None and optional:
            return None
        # JSON has no int/float split: an int is a fine float, a bool is neither
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, types):
            names = " or ".join(t.__name__ for t in types) + (" or null" if optional else "")
            raise ImportFormatError(f"{self.where}.{key}: expected {names}, got "
                                    f"{_kind(value)}")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], optional: bool = False) -> str | None:
        value = self.get(key, (str,), optional)
        if value is not None and value not in allowed:
            raise ImportFormatError(f"{self.where}.{key}: expected one of "
                                    f"{', '.join(allowed)}, got {value!r}")
        return value


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), type(value).__name__)


def _read_media(r: _Reader, where: str, blobs: dict[str, bytes]) -> tuple[StoredMedia, ...]:
    out = []
    for i, raw in enumerate(r.get("media", (list,), optional=True) or []):
        at = f"{where}.media[{i}]"
        x = _Reader(raw, at)
        kind = x.choice("kind", MEDIA_KINDS) or ""
        ext, digest = x.get("type", (str,)), x.get("sha256", (str,))
        if not re.fullmatch(r"[a-z0-9]{1,5}", ext):
            raise ImportFormatError(f"{at}.type: expected a file type like png, got {ext!r}")
        try:
            data = base64.b64decode(x.get("data", (str,)), validate=True)
        except (binascii.Error, ValueError) as e:
            raise ImportFormatError(f"{at}.data: not base64 ({e})") from e
        if hashlib.sha256(data).hexdigest() != digest:
            raise ImportFormatError(f"{at}.data: its bytes do not match its sha256")
        media = StoredMedia(kind, digest, ext)
        blobs[media.name] = data
        out.append(media)
    return tuple(out)


def _read_message(obj: object, where: str, known: set[int], blobs: dict[str, bytes]
                  ) -> StoredMessage:
    r = _Reader(obj, where)
    mid = r.get("id", (int,))
    if mid in known:
        raise ImportFormatError(f"{where}.id: {mid} is used twice")
    parent = r.get("parent", (int,), optional=True)
    if parent is not None and parent not in known:
        raise ImportFormatError(f"{where}.parent: {parent} is not a message listed before "
                                "this one in the conversation")
    calls = []
    raw_calls = r.get("tool_calls", (list,), optional=True) or []
    for i, raw in enumerate(raw_calls):
        c = _Reader(raw, f"{where}.tool_calls[{i}]")
        calls.append(ToolCall(c.get("id", (str,)), c.get("name", (str,)),
                              c.get("arguments", (str,))))
    return StoredMessage(
        id=mid, conversation_id=0, role=r.choice("role", ROLES) or "",
        content=r.get("content", (str,)), status=r.choice("status", STATUSES) or "",
        stats=r.get("stats", (dict,), optional=True), model=r.get("model", (str,), True),
        created_at=r.get("created_at", (float,)),
        reasoning=r.get("reasoning", (str,), optional=True) or "",
        tool_calls=tuple(calls), tool_call_id=r.get("tool_call_id", (str,), True),
        tool_name=r.get("tool_name", (str,), True), parent_id=parent,
        shown_child_id=r.get("shown_child", (int,), optional=True),
        media=_read_media(r, where, blobs))


def _read_conversation(obj: object, where: str) -> ConversationTree:
    r = _Reader(obj, where)
    raw_messages = r.get("messages", (list,))
    known: set[int] = set()
    messages = []
    blobs: dict[str, bytes] = {}
    for i, raw in enumerate(raw_messages):
        m = _read_message(raw, f"{where}.messages[{i}]", known, blobs)
        known.add(m.id)
        messages.append(m)
    children: dict[int | None, set[int]] = {m.parent_id: set() for m in messages}
    for m in messages:
        children[m.parent_id].add(m.id)
    for i, m in enumerate(messages):
        if m.shown_child_id is not None and m.shown_child_id not in children.get(m.id, ()):
            raise ImportFormatError(f"{where}.messages[{i}].shown_child: {m.shown_child_id} "
                                    f"is not a child of message {m.id}")
    root = r.get("shown_root", (int,), optional=True)
    if root is not None and root not in children.get(None, ()):
        raise ImportFormatError(f"{where}.shown_root: {root} is not a first message of this "
                                "conversation")
    title = r.get("title", (str,))
    if not title.strip():
        raise ImportFormatError(f"{where}.title: a conversation's title cannot be empty")
    conv = Conversation(
        id=0, title=title, model=r.get("model", (str,), optional=True),
        system_prompt=r.get("system_prompt", (str,)),
        created_at=r.get("created_at", (float,)), updated_at=r.get("updated_at", (float,)),
        thinking=r.choice("thinking", THINKING_SETTINGS, optional=True), shown_root_id=root,
        preset=r.get("preset", (str,), optional=True))
    return ConversationTree(conv, tuple(messages), blobs)


def from_json(text: str, source: str = "the file") -> list[ConversationTree]:
    """Read an export, checking all of it; ImportFormatError says what is wrong and where."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ImportFormatError(f"{source} is not JSON: {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = f"'format' is {data['format']!r}" if isinstance(data, dict) and \
            "format" in data else f"it is {_kind(data)} without a 'format'"
        raise ImportFormatError(f"{source} is not an Ember conversations export ({found}; "
                                f"expected \"format\": \"{FORMAT}\"). Export from Ember with "
                                "JSON chosen to get one.")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ImportFormatError(f"{source}: 'version' must be a positive integer, got "
                                f"{version!r}")
    if version > VERSION:
        raise ImportFormatError(f"{source} was written by a newer Ember (format version "
                                f"{version}; this one reads {VERSION}): update Ember")
    convs = data.get("conversations")
    if not isinstance(convs, list):
        raise ImportFormatError(f"{source}: 'conversations' must be a list, got {_kind(convs)}")
    return [_read_conversation(c, f"conversations[{i}]") for i, c in enumerate(convs)]


def import_file(history: History, path: Path) -> list[int]:
    """Add the conversations of an export file; their new ids. Nothing changes on an error."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ImportFormatError(f"cannot read {path}: {e}") from e
    items = from_json(text, str(path))
    for t in items:  # the files first: a message never holds one that is not there
        for name, data in t.blobs.items():
            ext = name.partition(".")[2]
            kind = next(x.kind for m in t.messages for x in m.media if x.name == name)
            history.store_media(data, kind, ext)
    return history.import_trees([(t.conversation, list(t.messages)) for t in items])


# -- Markdown -----------------------------------------------------------------------------

def fence(text: str, lang: str = "") -> str:
    """A fenced block that holds `text` whatever backticks are in it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _message_markdown(m: StoredMessage, version: tuple[int, int] | None,
                      link: MediaLink | None) -> str:
    heading = ROLE_HEADINGS.get(m.role, m.role)
    if m.role == "tool" and m.tool_name:
        heading += f" ({m.tool_name})"
    if version is not None:
        heading += f" (version {version[0] + 1} of {version[1]})"
    parts = [f"### {heading}"]
    if m.reasoning:
        parts.append(f"<details>\n<summary>Thinking</summary>\n\n{m.reasoning}\n\n</details>")
    if m.media and link is not None:
        parts.append("\n".join(
            f"![{x.kind} {i + 1}]({link(x)})" if x.kind == "image" else
            f"[{x.kind} {i + 1}]({link(x)})" for i, x in enumerate(m.media)))
    elif m.media:
        parts.append(f"*({len(m.media)} attachment{'s' if len(m.media) != 1 else ''})*")
    if m.role == "tool":
        parts.append(fence(m.content))
    elif m.content:
        parts.append(m.content)
    for call in m.tool_calls:
        parts.append(f"Tool call `{call.name}` (id `{call.id}`):\n\n"
                     + fence(_pretty(call.arguments), "json"))
    cited = [c for c in (m.stats or {}).get("sources") or [] if isinstance(c, str)]
    if cited:  # the document pieces the answer was given (app.gui.chat_controller)
        parts.append("Sources:\n\n" + "\n".join(f"- {c}" for c in cited))
    if m.status in ("interrupted", "stopped", "error"):
        parts.append(f"*({m.status})*")
    return "\n\n".join(parts)


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False, indent=2)
    except json.JSONDecodeError:
        return arguments


def to_markdown(items: list[ConversationTree], link: MediaLink | None = None) -> str:
    """The shown paths; media linked where `link` says (None: only counted)."""
    out = []
    for t in items:
        c = t.conversation
        head = [f"# {c.title}", ""]
        if c.model:
            head.append(f"- Model: `{c.model}`")
        if c.preset:
            head.append(f"- Preset: {c.preset}")
        head.append(f"- Started: {time.strftime('%Y-%m-%d %H:%M', time.localtime(c.created_at))}")
        if c.system_prompt.strip():
            head += ["", "System prompt:", "", "\n".join("> " + line for line in
                                                         c.system_prompt.splitlines())]
        place = versions(t.messages)
        body = [_message_markdown(m, (place[m.id].index, place[m.id].count)
                                  if place[m.id].count > 1 else None, link)
                for m in shown_path(t.messages, c.shown_root_id)]
        out.append("\n".join(head) + "\n\n" + "\n\n".join(body))
    return "\n\n---\n\n".join(out) + "\n"


def export_file(history: History, path: Path, ids: list[int] | None = None,
                fmt: str | None = None) -> int:
    """Write the conversations `ids` (None: all) to `path` as Markdown or JSON (`fmt`, else by
    the file's suffix: .json is JSON, anything else Markdown); how many were written."""
    fmt = fmt or ("json" if path.suffix.lower() == ".json" else "md")
    if fmt not in ("md", "json"):
        raise EmberError(f"unknown export format {fmt!r} (use md or json)")
    items = trees(history, ids)
    if fmt == "json":
        text = to_json(items, history.read_media)
    else:
        text = to_markdown(items, copy_media_beside(history, items, path))
    path.write_text(text, encoding="utf-8")
    return len(items)


def copy_media_beside(history: History, items: list[ConversationTree], path: Path
                      ) -> MediaLink:
    """Copy the media the Markdown shows into `<name>-media/` beside `path`; the links to
    them, relative to the .md file."""
    folder = path.with_name(f"{path.stem}-media")
    shown = {x.name: x for t in items
             for m in shown_path(t.messages, t.conversation.shown_root_id) for x in m.media}
    if shown:
        folder.mkdir(parents=True, exist_ok=True)
    for name, media in shown.items():
        try:
            shutil.copyfile(history.media_path(media), folder / name)
        except OSError as e:
            raise EmberError(f"cannot copy the {media.kind} {name} beside {path}: "
                             f"{e.strerror or e}") from e
    return lambda media: f"{quote(folder.name)}/{media.name}"


def media_uri(history: History) -> MediaLink:
    """Links to the data folder's own files (Markdown written to standard output)."""
    return lambda media: history.media_path(media).resolve().as_uri()
