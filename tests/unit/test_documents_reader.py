"""Reading attached files: each kind into sections that know their page or line, and each file
that cannot be read refused with the reason in its message. The PDFs and .docx files are made
here, by fpdf2, pypdf's writer and python-docx."""

from __future__ import annotations

import codecs
from pathlib import Path

import docx
import pytest
from docx.enum.text import WD_BREAK
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter

from app.documents.reader import SUPPORTED_SUFFIXES, DocumentError, Section, read_document
from tests.support.crafted_docx import docx_with


def write_pdf(path: Path, pages: list[str]) -> Path:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    pdf.output(str(path))
    return path


def refusal(path: Path) -> str:
    with pytest.raises(DocumentError) as caught:
        read_document(path)
    message = str(caught.value)
    assert message.startswith(f"{path.name}: ")
    return message


def test_code_is_one_section_from_line_1_with_windows_line_ends_made_plain(tmp_path: Path):
    path = tmp_path / "main.py"
    path.write_bytes(b"import os\r\n\r\nprint(os.getcwd())\r\n")
    doc = read_document(path)
    assert (doc.name, doc.kind, doc.pages) == ("main.py", "code", None)
    assert doc.sections == (Section(None, 1, "import os\n\nprint(os.getcwd())\n"),)
    assert len(doc.sha256) == 64 and doc.path == str(path)


def test_markdown_and_text_kinds_and_the_dialog_suffixes(tmp_path: Path):
    (tmp_path / "notes.md").write_text("# Title\n\nbody\n", encoding="utf-8")
    (tmp_path / "README").write_text("no suffix, but text\n", encoding="utf-8")
    assert read_document(tmp_path / "notes.md").kind == "markdown"
    assert read_document(tmp_path / "README").kind == "text"
    assert {".pdf", ".docx", ".md", ".py", ".txt"} <= SUPPORTED_SUFFIXES


def test_utf16_with_a_bom_and_windows_1252_text_are_decoded(tmp_path: Path):
    (tmp_path / "u16.txt").write_bytes(codecs.BOM_UTF16_LE + "Grüße, 東京".encode("utf-16-le"))
    (tmp_path / "old.txt").write_bytes("café – naïve".encode("cp1252"))
    assert read_document(tmp_path / "u16.txt").sections[0].text == "Grüße, 東京"
    assert read_document(tmp_path / "old.txt").sections[0].text == "café – naïve"


def test_a_binary_file_is_refused_as_binary(tmp_path: Path):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * 4)
    assert "is a binary file, not text" in refusal(path)
    png = tmp_path / "photo.txt"  # a binary file whatever its name says
    png.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    assert "is a binary file" in refusal(png)


def test_a_file_of_another_encoding_without_a_text_suffix_says_so(tmp_path: Path):
    path = tmp_path / "LEGACY"
    path.write_bytes("naïve".encode("latin-1"))
    assert "is not UTF-8 text (byte 0xef at offset 2); save it as UTF-8" in refusal(path)


def test_missing_empty_folder_and_old_word_files_each_say_why(tmp_path: Path):
    assert "no such file" in refusal(tmp_path / "gone.txt")
    (tmp_path / "empty.md").write_bytes(b"")
    assert refusal(tmp_path / "empty.md").endswith("the file is empty")
    (tmp_path / "blank.txt").write_text("  \n\n", encoding="utf-8")
    assert refusal(tmp_path / "blank.txt").endswith("has no text")
    (tmp_path / "folder.md").mkdir()
    assert "is a folder" in refusal(tmp_path / "folder.md")
    (tmp_path / "letter.doc").write_bytes(b"\xd0\xcf\x11\xe0")
    assert "the old Word format (.doc); save it as .docx" in refusal(tmp_path / "letter.doc")


def test_a_2_gb_file_is_refused_by_its_size_before_reading(tmp_path: Path):
    path = tmp_path / "huge.pdf"
    with path.open("wb") as f:  # sparse: no 2 GB written
        f.truncate(2 * 1024**3)
    assert refusal(path).endswith("2.0 GB is too large; Ember reads PDF files of up to 256.0 MB")
    log = tmp_path / "server.log"
    with log.open("wb") as f:
        f.truncate(40 * 1024**2)
    assert "40.0 MB is too large; Ember reads text files of up to 16.0 MB" in refusal(log)


def test_a_pdf_is_one_section_per_page_numbered_from_1(tmp_path: Path):
    path = write_pdf(tmp_path / "report.pdf", ["Alpha page text.", "", "Gamma page\ntext."])
    doc = read_document(path)
    assert (doc.kind, doc.pages) == ("pdf", 3)
    assert [s.page for s in doc.sections] == [1, 2, 3]
    assert [s.first_line for s in doc.sections] == [1, 1, 1]
    assert "Alpha page text." in doc.sections[0].text
    assert doc.sections[1].text == ""  # an empty page keeps its number for the pages after
    assert doc.sections[2].text.split() == ["Gamma", "page", "text."]


def test_a_damaged_pdf_says_it_is_damaged(tmp_path: Path):
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.7\nthis is not the rest of a PDF\n" * 20)
    assert "is damaged or not a PDF" in refusal(path)
    fake = tmp_path / "fake.pdf"
    fake.write_text("hello, I am text", encoding="utf-8")
    assert "is damaged or not a PDF" in refusal(fake)


def test_a_pdf_encrypted_with_a_password_is_refused_and_one_without_is_read(tmp_path: Path):
    plain = write_pdf(tmp_path / "plain.pdf", ["Secret plans for the garden."])
    for name, user_password in (("locked.pdf", "hunter2"), ("owner-only.pdf", "")):
        writer = PdfWriter(clone_from=PdfReader(plain))
        writer.encrypt(user_password=user_password, owner_password="owner",
                       algorithm="AES-256")
        with (tmp_path / name).open("wb") as f:
            writer.write(f)
    assert "the PDF is encrypted with a password" in refusal(tmp_path / "locked.pdf")
    # only an owner password (limits on printing or copying): opens without one
    doc = read_document(tmp_path / "owner-only.pdf")
    assert "Secret plans for the garden." in doc.sections[0].text


def test_a_pdf_of_images_only_says_it_has_no_text_layer(tmp_path: Path):
    pdf = FPDF()
    for _ in range(2):
        pdf.add_page()
        pdf.rect(20, 20, 100, 60, style="F")  # drawn, like a scan: no text objects
    pdf.output(str(tmp_path / "scan.pdf"))
    message = refusal(tmp_path / "scan.pdf")
    assert "the PDF has no text layer (2 pages of images, a scan?)" in message
    assert "has no OCR" in message


def test_a_docx_gives_paragraphs_and_table_rows_split_at_page_breaks(tmp_path: Path):
    d = docx.Document()
    d.add_paragraph("Quarterly report")
    d.add_paragraph("Sales rose in the north.")
    table = d.add_table(rows=2, cols=2)
    for r, row in enumerate([("Region", "Sales"), ("North", "1200")]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    d.add_paragraph("End of page one.").add_run().add_break(WD_BREAK.PAGE)
    d.add_paragraph("Page two begins.")
    d.save(str(tmp_path / "report.docx"))
    doc = read_document(tmp_path / "report.docx")
    assert (doc.kind, doc.pages) == ("docx", 2)
    assert doc.sections[0] == Section(1, 1, "Quarterly report\nSales rose in the north.\n"
                                            "Region | Sales\nNorth | 1200\nEnd of page one.")
    assert doc.sections[1] == Section(2, 1, "Page two begins.")


def test_a_docx_without_page_breaks_is_one_section_of_lines(tmp_path: Path):
    d = docx.Document()
    d.add_paragraph("First paragraph.")
    d.add_paragraph("Second\tparagraph.")
    d.save(str(tmp_path / "memo.docx"))
    doc = read_document(tmp_path / "memo.docx")
    assert doc.pages is None
    assert doc.sections == (Section(None, 1, "First paragraph.\nSecond\tparagraph."),)


def test_a_damaged_or_encrypted_docx_says_why(tmp_path: Path):
    (tmp_path / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip" * 10)
    assert "is damaged or not a .docx file" in refusal(tmp_path / "broken.docx")
    # Word saves a password-protected .docx as an OLE compound file
    (tmp_path / "locked.docx").write_bytes(bytes.fromhex("d0cf11e0a1b11ae1") + b"\0" * 512)
    assert "is encrypted with a password" in refusal(tmp_path / "locked.docx")


def test_a_docx_saved_by_word_is_split_where_word_rendered_its_pages(tmp_path: Path):
    """Word marks where each page started when it last laid the file out; those are the
    pages the user saw (a long paragraph flows onto the next page without a typed break)."""
    from docx.oxml import OxmlElement

    d = docx.Document()
    d.add_paragraph("Page one text.")
    flowing = d.add_paragraph("Ends page one, ")
    flowing.add_run()._r.append(OxmlElement("w:lastRenderedPageBreak"))
    flowing.add_run("starts page two.")
    d.add_paragraph("Still page two.")
    d.save(str(tmp_path / "word.docx"))
    doc = read_document(tmp_path / "word.docx")
    assert [(s.page, s.text) for s in doc.sections] == [
        (1, "Page one text.\nEnds page one, "), (2, "starts page two.\nStill page two.")]


def test_a_zip_bomb_docx_is_refused_from_its_directory_before_inflating(tmp_path: Path):
    # 32 MiB of zeros stored in 32 KB: refused from the zip's directory, nothing inflated
    path = docx_with(tmp_path / "bomb.docx", {"word/media/image1.bin": bytes(32 << 20)})
    assert path.stat().st_size < 100_000
    assert refusal(path) == ("bomb.docx: word/media/image1.bin inside it unpacks 1,028 times "
                             "larger than it is stored; a zip bomb?")


def test_a_docx_of_too_many_files_is_refused(tmp_path: Path):
    path = docx_with(tmp_path / "many.docx", {f"x/{i}.xml": b"" for i in range(10_001)})
    assert "holds 10,018 files inside" in refusal(path)
