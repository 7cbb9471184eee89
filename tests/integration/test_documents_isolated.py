"""PDF and .docx files are parsed in a child process bounded in time and memory
(app.documents.isolated): files crafted to hang or exhaust the readers are refused with the
reason, in bounded time, and the window's process neither grows nor waits."""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import pytest
from fpdf import FPDF

from app.documents.isolated import ParseLimits, read_isolated
from app.documents.reader import DocumentError, read_document
from tests.support.crafted_docx import docx_with

MB = 1 << 20


def _peak_rss() -> int:
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _pdf(objects: list[bytes]) -> bytes:
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


def page_tree_bomb(depth: int) -> bytes:
    """A PDF of 2**depth pages in ~2 KB: each Pages node lists the same child twice."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        n = 2 + level
        parent = b" /Parent %d 0 R" % (n - 1) if level else b""
        objects.append(b"<< /Type /Pages /Kids [%d 0 R %d 0 R] /Count %d%s >>"
                       % (n + 1, n + 1, 2 ** (depth - level), parent))
    leaf = 2 + depth
    content = b"BT /F1 12 Tf 72 720 Td (bomb) Tj ET"
    objects.append(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                   b"/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 "
                   b"/BaseFont /Helvetica >> >> >> >>" % (leaf - 1, leaf + 1))
    objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    return _pdf(objects)


def test_a_pdf_and_a_docx_read_in_the_child_as_in_process(tmp_path: Path):
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in ("First page.", "Second page."):
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    pdf.output(str(tmp_path / "a.pdf"))
    for path in (tmp_path / "a.pdf", docx_with(tmp_path / "b.docx")):
        assert read_isolated(path) == read_document(path)


def test_a_pdf_whose_page_tree_multiplies_hits_the_time_limit(tmp_path: Path):
    # 2 KB claiming 32,768 pages: pypdf takes ~11 s on it (its page-tree cap is 100,000)
    path = tmp_path / "bomb.pdf"
    path.write_bytes(page_tree_bomb(15))
    rss, start = _peak_rss(), time.monotonic()
    with pytest.raises(DocumentError, match=r"^bomb\.pdf: reading it took longer than 1 s"):
        read_isolated(path, ParseLimits(seconds=1))
    assert time.monotonic() - start < 10
    assert _peak_rss() - rss < 20 * MB


@pytest.mark.skipif(sys.platform == "win32", reason="no RLIMIT_AS on Windows (time limit only)")
def test_a_docx_whose_xml_needs_more_memory_than_the_cap_is_refused_for_memory(tmp_path: Path):
    # 80 KB whose 15 MB of XML need ~250 MB parsed; the cap is 160 MiB for the whole child
    path = docx_with(tmp_path / "wide.docx", paragraphs=450_000)
    rss = _peak_rss()
    with pytest.raises(DocumentError, match=r"^wide\.docx: reading it needed more than 160 MiB"):
        read_isolated(path, ParseLimits(seconds=30, memory_bytes=160 * MB))
    assert _peak_rss() - rss < 20 * MB
