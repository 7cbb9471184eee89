"""Model answers as HTML for Qt's rich-text views: CommonMark, tables, highlighted code.

Raw HTML in an answer is shown as text, never interpreted (a model's output is untrusted).
Images are shown as links, never loaded: `![](/dev/zero)` or `![](file:///...)` in a model's
answer or an imported chat would have Qt read that file (or fetch that URL) on the UI thread.
Each fenced code block gets a "Copy" link `copy:N`; the view looks N up in `code_blocks`.
Qt's rich text understands a subset of HTML 4 with inline styles, hence pygments' inline
(`noclasses`) output and tables for the code frames.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name, guess_lexer
from pygments.util import ClassNotFound


@dataclass
class Rendered:
    html: str
    code_blocks: list[str] = field(default_factory=list)


def _lexer(lang: str, code: str):  # a pygments Lexer
    try:
        return get_lexer_by_name(lang) if lang else guess_lexer(code)
    except ClassNotFound:
        return get_lexer_by_name("text")


def render_markdown(text: str, dark: bool = False) -> Rendered:
    blocks: list[str] = []
    style = "monokai" if dark else "friendly"
    formatter = HtmlFormatter(noclasses=True, nowrap=True, style=style)
    frame = "#272822" if dark else "#f4f4f4"
    link = "#8ab4f8" if dark else "#1a5fb4"
    md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table")

    def fence(renderer, tokens, idx, options, env) -> str:
        token = tokens[idx]
        code = token.content.rstrip("\n")
        lang = token.info.strip().split(" ")[0] if token.info else ""
        blocks.append(code)
        body = highlight(code, _lexer(lang, code), formatter) if code else ""
        label = html.escape(lang or "code")
        return (f'<table width="100%" cellspacing="0" cellpadding="6" bgcolor="{frame}">'
                f'<tr><td><small>{label}</small></td><td align="right">'
                f'<a href="copy:{len(blocks) - 1}" style="color:{link}">Copy</a></td></tr>'
                f'<tr><td colspan="2"><pre style="margin:0; white-space:pre-wrap">{body}</pre>'
                f'</td></tr></table>\n')

    def image(renderer, tokens, idx, options, env) -> str:
        token = tokens[idx]
        src = str(token.attrGet("src") or "")
        alt = html.escape(token.content or "image")
        return (f'<a href="{html.escape(src, quote=True)}" style="color:{link}">'
                f'[image: {alt}]</a>')

    md.add_render_rule("image", image)
    md.add_render_rule("fence", fence)
    md.add_render_rule("code_block", fence)
    return Rendered(md.render(text), blocks)
