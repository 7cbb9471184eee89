"""The real chat templates and tokenizer vocabularies that llama.cpp vendors for its own
tests, read from the llama-cpp-python source distribution Ember builds its wheel from.

packaging/llama_cpp_wheel.sh keeps that sdist in the wheel cache; when it is not there (a
machine that got its wheel elsewhere), pip downloads it from PyPI. Only the `models/` files
the tests read are extracted, once, next to it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from functools import cache
from pathlib import Path

VERSION = "0.3.36"
CACHE = Path(os.environ.get("EMBER_WHEEL_CACHE")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "ember" / "wheels")
MODELS = "vendor/llama.cpp/models/"


@cache
def vendor_models() -> Path:
    """`vendor/llama.cpp/models` of the sdist: `templates/*.jinja`, `ggml-vocab-*.gguf`."""
    target = CACHE / "sdist" / f"llama_cpp_python-{VERSION}-models"
    if not (target / "templates").is_dir():
        _extract(_sdist(), target)
    return target


def template(name: str) -> str:
    """A vendored chat template by its file name without `.jinja`."""
    return (vendor_models() / "templates" / f"{name}.jinja").read_text(encoding="utf-8")


def vocab(name: str) -> Path:
    """A vendored vocabulary-only GGUF: `qwen2` is ggml-vocab-qwen2.gguf."""
    return vendor_models() / f"ggml-vocab-{name}.gguf"


def _sdist() -> Path:
    file = CACHE / "sdist" / f"llama_cpp_python-{VERSION}.tar.gz"
    if not file.is_file():
        file.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", "-d", str(file.parent), f"llama-cpp-python=={VERSION}"],
                       check=True, stdout=subprocess.DEVNULL)
    return file


def _extract(sdist: Path, target: Path) -> None:
    prefix = f"llama_cpp_python-{VERSION}/{MODELS}"
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".models."))
    with tarfile.open(sdist) as tar:
        for member in tar:
            name = member.name
            if not member.isfile() or not name.startswith(prefix):
                continue
            rel = name[len(prefix):]
            if not (rel.startswith("templates/") and rel.endswith(".jinja")
                    or rel.startswith("ggml-vocab-") and rel.endswith(".gguf")):
                continue
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(out, "wb") as dst:  # type: ignore[union-attr]
                shutil.copyfileobj(src, dst)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)  # atomic: a half-extracted folder is never found
