"""Refuse a .docx (a zip) whose directory describes a zip bomb, before anything is inflated."""

from __future__ import annotations

import zipfile
from pathlib import Path

GIB = 1 << 30
MB = 1 << 20


# a .docx is a zip; refused before anything is inflated when its directory promises too much
MAX_ZIP_ENTRIES = 10_000
MAX_ZIP_UNCOMPRESSED = 1 * GIB
MAX_ZIP_RATIO = 200  # what deflate gets on real XML is ~10-30; images barely shrink
ZIP_RATIO_ABOVE = 16 * MB  # small entries may shrink as they like


def _amount(n: float) -> str:
    return f"{n / GIB:g} GiB" if n >= GIB else f"{n / MB:g} MiB"


def check_zip(name: str, path: Path) -> None:
    """DocumentError when a .docx's zip directory describes a zip bomb."""
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise _error(name, f"is damaged or not a .docx file ({e})") from None
    if len(infos) > MAX_ZIP_ENTRIES:
        raise _error(name, f"holds {len(infos):,} files inside; a .docx holds far fewer "
                                  f"(refused above {MAX_ZIP_ENTRIES:,}): a zip bomb?")
    total = sum(i.file_size for i in infos)
    if total > MAX_ZIP_UNCOMPRESSED:
        raise _error(name, f"would unpack to {_amount(total)}; Ember unpacks .docx files "
                                  f"of up to {_amount(MAX_ZIP_UNCOMPRESSED)}: a zip bomb?")
    for i in infos:
        ratio = i.file_size // max(i.compress_size, 1)
        if i.file_size > ZIP_RATIO_ABOVE and ratio > MAX_ZIP_RATIO:
            raise _error(name, f"{i.filename} inside it unpacks {ratio:,} times larger "
                                      "than it is stored; a zip bomb?")


def _error(name: str, why: str) -> Exception:
    from app.documents.reader import DocumentError
    return DocumentError(name, why)
