"""Files a user attaches to a chat, read into text: text and code, Markdown, PDF, .docx.

A document is a list of sections, each with where it starts (a PDF page, a .docx page, or line
1 of a text file), so every piece cut from it later can say where it came from. A file that
cannot be read raises DocumentError, whose text names the file and why ("scan.pdf: the PDF has
no text ...").
"""

from __future__ import annotations

import codecs
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.documents.zipcheck import check_zip
from backends.errors import EmberError

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdown", ".mkd", ".mdx"})
TEXT_SUFFIXES = frozenset({".txt", ".text", ".log", ".csv", ".tsv", ".rst", ".org", ".adoc",
                           ".asciidoc", ".tex", ".bib", ".srt", ".vtt", ".eml"})
CODE_SUFFIXES = frozenset({
    ".py", ".pyi", ".ipynb", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".java", ".kt",
    ".kts", ".scala", ".groovy", ".gradle", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh",
    ".hxx", ".cu", ".cuh", ".m", ".mm", ".cs", ".fs", ".vb", ".go", ".rs", ".swift", ".rb",
    ".php", ".pl", ".pm", ".lua", ".r", ".jl", ".dart", ".hs", ".ml", ".mli", ".ex", ".exs",
    ".erl", ".clj", ".cljs", ".elm", ".nim", ".zig", ".v", ".sv", ".vhd", ".asm", ".s",
    ".sh", ".bash", ".zsh", ".fish", ".ps1", ".bat", ".cmd", ".sql", ".graphql", ".proto",
    ".html", ".htm", ".css", ".scss", ".sass", ".less", ".vue", ".svelte", ".xml", ".xsd",
    ".svg", ".json", ".jsonl", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".properties",
    ".env", ".cmake", ".mk", ".make", ".dockerfile", ".tf", ".nix", ".diff", ".patch",
})
PDF_SUFFIX = ".pdf"
DOCX_SUFFIX = ".docx"
# for the file dialog's filter; files with other names (Makefile, README) are read too when
# their content is text
SUPPORTED_SUFFIXES = (MARKDOWN_SUFFIXES | TEXT_SUFFIXES | CODE_SUFFIXES
                      | frozenset({PDF_SUFFIX, DOCX_SUFFIX}))
# Formats people will try whose text Ember does not read, each with what to do instead.
UNREADABLE_FORMATS = {
    ".doc": "the old Word format (.doc); save it as .docx",
    ".rtf": "rich text (.rtf); save it as .docx or plain text",
    ".odt": "an OpenDocument text (.odt); save it as .docx",
    ".pptx": "a PowerPoint file; save it as PDF",
    ".xlsx": "an Excel file; save the sheet as .csv",
    ".xls": "an Excel file; save the sheet as .csv",
    ".epub": "an e-book (.epub); Ember reads PDF, .docx, text and code files",
}

MB = 1024 * 1024
# A PDF or .docx is parsed by pypdf / python-docx; the window reads them through
# app.documents.isolated, in a child process bounded in time and memory.
# What one file may weigh. Text is read whole into memory; a PDF or .docx is mostly images and
# fonts, so its file may be larger than the text it holds.
MAX_TEXT_BYTES = 16 * MB
MAX_PDF_BYTES = 256 * MB
MAX_DOCX_BYTES = 64 * MB
# What one document's text may hold: 16 M characters is about 4 M tokens, some 16,000 pieces
# to embed (many minutes on a laptop's CPU); a larger file is almost always not prose.
MAX_CHARACTERS = 16_000_000
SNIFF_BYTES = 8192  # how much of a file with an unknown suffix is looked at to tell text


class DocumentError(EmberError):
    """A file that cannot be attached; str() names the file and why."""

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self.why = why
        super().__init__(f"{name}: {why}")


@dataclass(frozen=True)
class Section:
    """One page of a PDF, one page of a .docx (between page breaks), or a whole text file."""
    page: int | None  # 1-based page; None for text, code and Markdown
    first_line: int  # 1-based line where this section's text starts (1 for pages)
    text: str


@dataclass(frozen=True)
class Document:
    name: str  # the file's name, shown to the user and in citations
    path: str
    kind: str  # "text" | "markdown" | "code" | "pdf" | "docx"
    sha256: str
    sections: tuple[Section, ...]

    @property
    def characters(self) -> int:
        return sum(len(s.text) for s in self.sections)

    @property
    def pages(self) -> int | None:
        """The number of pages of a paged document (PDF, .docx with page breaks)."""
        return len(self.sections) if self.sections and self.sections[0].page else None


def read_document(path: Path) -> Document:
    """Read `path` into a Document, or raise DocumentError saying why it cannot be read."""
    path = Path(path)
    name = path.name
    suffix = path.suffix.lower()
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DocumentError(name, f"no such file ({path})") from None
    except OSError as e:
        raise DocumentError(name, f"cannot be read: {e.strerror or e}") from None
    if path.is_dir():
        raise DocumentError(name, "is a folder; attach the files in it")
    if suffix in UNREADABLE_FORMATS:
        raise DocumentError(name, UNREADABLE_FORMATS[suffix])
    limit = {PDF_SUFFIX: MAX_PDF_BYTES, DOCX_SUFFIX: MAX_DOCX_BYTES}.get(suffix, MAX_TEXT_BYTES)
    if size > limit:
        what = {PDF_SUFFIX: "PDF", DOCX_SUFFIX: ".docx"}.get(suffix, "text")
        raise DocumentError(name, f"{_size(size)} is too large; Ember reads {what} files of up "
                                  f"to {_size(limit)}")
    if size == 0:
        raise DocumentError(name, "the file is empty")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DocumentError(name, f"cannot be read: {e.strerror or e}") from None
    digest = hashlib.sha256(data).hexdigest()
    if suffix == PDF_SUFFIX:
        kind, sections = "pdf", _pdf_sections(name, path)
    elif suffix == DOCX_SUFFIX:
        kind, sections = "docx", _docx_sections(name, path, data)
    else:
        kind = ("markdown" if suffix in MARKDOWN_SUFFIXES
                else "code" if suffix in CODE_SUFFIXES else "text")
        sections = (Section(None, 1, _decode_text(name, data, suffix)),)
    doc = Document(name, str(path), kind, digest, sections)
    if not any(s.text.strip() for s in sections):
        raise DocumentError(name, "has no text")
    if doc.characters > MAX_CHARACTERS:
        raise DocumentError(name, f"holds {doc.characters:,} characters of text; Ember reads "
                                  f"documents of up to {MAX_CHARACTERS:,}")
    return doc


def _size(n: int) -> str:
    return f"{n / MB / 1024:.1f} GB" if n >= 1024 * MB else f"{n / MB:.1f} MB"


def _decode_text(name: str, data: bytes, suffix: str) -> str:
    """A text file's content: UTF-8 (with or without BOM), or UTF-16 with a BOM. A file with a
    known text suffix that is not UTF-8 is read as Windows-1252, what Notepad long saved."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return _lines(data.decode("utf-16"))
        except UnicodeDecodeError:
            raise DocumentError(name, "starts with a UTF-16 mark but is not UTF-16 text") from None
    if b"\0" in data[:SNIFF_BYTES] or (suffix in SUPPORTED_SUFFIXES and b"\0" in data):
        raise DocumentError(name, "is a binary file, not text; Ember reads text, code, "
                                  "Markdown, PDF and .docx files")
    try:
        return _lines(data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        if suffix in SUPPORTED_SUFFIXES:
            try:
                return _lines(data.decode("cp1252"))
            except UnicodeDecodeError:
                pass
        raise DocumentError(name, f"is not UTF-8 text (byte {data[e.start]:#04x} at offset "
                                  f"{e.start}); save it as UTF-8") from None


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _pdf_sections(name: str, path: Path) -> tuple[Section, ...]:
    """One section per page (empty pages too, so page numbers stay the PDF's own)."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            # a PDF with only an owner password (printing/copying limits) opens with the
            # empty user password; this one needs the password to be opened at all
            raise DocumentError(name, "the PDF is encrypted with a password; open it, save an "
                                      "unprotected copy and attach that")
        pages = list(reader.pages)
    except (DocumentError, MemoryError):
        raise
    except (DependencyError, FileNotDecryptedError) as e:
        raise DocumentError(name, f"the PDF is encrypted in a way Ember cannot open ({e}); "
                                  "save an unprotected copy and attach that") from None
    except PdfReadError as e:
        raise DocumentError(name, f"is damaged or not a PDF ({e})") from None
    except Exception as e:  # pypdf raises many kinds on broken files (KeyError, ValueError...)
        raise DocumentError(name, f"is damaged or not a PDF ({type(e).__name__}: {e})") from None
    if not pages:
        raise DocumentError(name, "the PDF has no pages")
    texts = []
    for page in pages:
        try:
            texts.append(_lines(page.extract_text() or "").strip("\n"))
        except MemoryError:
            raise
        except Exception:  # one broken page (a bad font or stream) leaves the rest readable
            texts.append("")
    if not any(t.strip() for t in texts):
        count = f"{len(pages)} page{'s' if len(pages) != 1 else ''}"
        raise DocumentError(name, f"the PDF has no text layer ({count} of images, a scan?); "
                                  "Ember reads a PDF's text and has no OCR: run OCR on it first")
    return tuple(Section(i + 1, 1, t) for i, t in enumerate(texts))


OLE_MAGIC = bytes.fromhex("d0cf11e0a1b11ae1")  # a compound file: .doc, or an encrypted .docx


def _docx_sections(name: str, path: Path, data: bytes) -> tuple[Section, ...]:
    """Paragraphs and tables in document order. Page breaks split sections: the ones Word
    rendered when it last saved the file (the pages the user saw), or, in a file with none,
    the hard page breaks typed into it. Without either, one section with no page."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    if data.startswith(OLE_MAGIC):
        raise DocumentError(name, "is encrypted with a password or is an old .doc file "
                                  "renamed; save an unprotected .docx and attach that")
    check_zip(name, path)
    try:
        body = docx.Document(str(path)).element.body
    except (PackageNotFoundError, KeyError, ValueError) as e:
        raise DocumentError(name, f"is damaged or not a .docx file ({e})") from None
    except MemoryError:
        raise
    except Exception as e:  # zipfile.BadZipFile, lxml's XMLSyntaxError ...
        raise DocumentError(name, f"is damaged or not a .docx file ({type(e).__name__}: {e})"
                            ) from None
    rendered = any(True for _ in body.iter(_w("lastRenderedPageBreak")))
    pages: list[list[str]] = [[]]
    for block in body.iterchildren():
        if block.tag == _w("p"):
            parts = _paragraph_parts(block, rendered)
            for i, part in enumerate(parts):
                if i:
                    pages.append([])
                if part or i == len(parts) - 1:
                    pages[-1].append(part)
        elif block.tag == _w("tbl"):
            pages[-1].extend(_table_lines(block))
    texts = ["\n".join(lines).strip("\n") for lines in pages]
    if len(texts) == 1:
        return (Section(None, 1, texts[0]),)
    return tuple(Section(i + 1, 1, t) for i, t in enumerate(texts))


def _w(tag: str) -> str:
    return "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}" + tag


def _paragraph_parts(p: Any, rendered: bool) -> list[str]:
    """A paragraph's text, cut where a page starts inside it (one part without a break)."""
    parts = [""]
    breaks_before = p.find(f"{_w('pPr')}/{_w('pageBreakBefore')}") is not None
    if breaks_before and not rendered:
        parts.append("")
    for el in p.iter(_w("t"), _w("tab"), _w("br"), _w("cr"), _w("lastRenderedPageBreak")):
        if el.tag == _w("t"):
            parts[-1] += el.text or ""
        elif el.tag == _w("tab"):
            parts[-1] += "\t"
        elif el.tag == _w("lastRenderedPageBreak"):
            if rendered:
                parts.append("")
        elif el.get(_w("type")) == "page":
            if not rendered:
                parts.append("")
        elif el.get(_w("type")) != "column":
            parts[-1] += "\n"
    return parts


def _table_lines(tbl: Any) -> list[str]:
    """One line per row, its cells joined by " | " (a merged cell once)."""
    lines = []
    for tr in tbl.iterchildren(_w("tr")):
        cells = []
        for tc in tr.iterchildren(_w("tc")):
            text = " ".join("".join(t.text or "" for t in p.iter(_w("t")))
                            for p in tc.iter(_w("p"))).strip()
            cells.append(text)
        if any(cells):
            lines.append(" | ".join(cells))
    return lines
