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
