"""A real .docx (made by python-docx) reworked into what a stranger could send: more XML than
it needs, or extra files in its zip."""

from __future__ import annotations

import zipfile
from pathlib import Path

import docx


def docx_with(path: Path, extra: dict[str, bytes] | None = None, paragraphs: int = 0) -> Path:
    """A .docx made by python-docx, with `paragraphs` more one-letter paragraphs in its XML and
    `extra` files added to its zip."""
    base = path.with_suffix(".base.docx")
    d = docx.Document()
    d.add_paragraph("The harbour opens at dawn.")
    d.save(str(base))
    with zipfile.ZipFile(base) as z, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in z.infolist():
            data = z.read(info.filename)
            if info.filename == "word/document.xml" and paragraphs:
                at = data.index(b"<w:body>") + len(b"<w:body>")
                data = data[:at] + b"<w:p><w:r><w:t>a</w:t></w:r></w:p>" * paragraphs + data[at:]
            out.writestr(info, data)
        for name, data in (extra or {}).items():
            out.writestr(name, data)
    return path
