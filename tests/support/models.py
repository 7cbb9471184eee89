"""The real models the integration and gui tiers run, and where they are kept."""

from __future__ import annotations

import os
from pathlib import Path

QWEN = "qwen2.5-coder-0.5b-instruct"
QWEN15 = "qwen2.5-coder-1.5b-instruct"
GEMMA = "gemma-3-270m"
# kept between runs (750 MB of downloads); EMBER_TEST_HOME moves it
TEST_HOME = Path(os.environ.get("EMBER_TEST_HOME",
                                Path.home() / ".cache" / "ember" / "test-home"))
MINILM = "all-minilm-l6-v2"  # converted from its PyPI wheel at pull time


def minilm_key() -> str:
    """What the converted MiniLM in the test home depends on: the registry's source, the
    converter's code and the gguf library that writes the file."""
    import hashlib
    from importlib.metadata import version

    from app.pull import bert_to_gguf
    from app.registry import load_registry

    variant = load_registry().get(MINILM).variant()
    parts = [repr(variant), Path(bert_to_gguf.__file__).read_text(encoding="utf-8"),
             version("gguf")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
