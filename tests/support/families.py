"""Chat templates of the registry's families: llama.cpp's vendored copies, and ours for the
ones it lacks (tests/data/templates/SOURCES.md says where those come from)."""

from __future__ import annotations

from pathlib import Path

from backends.chat_format.render import ChatTemplate
from tests.support.llama_sdist import template

OURS = Path(__file__).parent.parent / "data" / "templates"


def chat(name: str, bos: str = "", eos: str = "") -> ChatTemplate:
    file = OURS / f"{name}.jinja"
    source = file.read_text(encoding="utf-8") if file.is_file() else template(name)
    return ChatTemplate(source, bos, eos)
