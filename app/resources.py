"""Where Ember's data files are: the model registry (`models.yaml`) and `assets/` (style
sheets). Three layouts, looked for in this order:

- a PyInstaller bundle: at the top of its internal folder (`sys._MEIPASS`); the bundle's spec
  puts `models.yaml` and `assets/` there;
- an installed wheel: `app/_data/`, where the build copies them (setup.py);
- the source tree (a checkout, an editable install): the repository's top, where they live.

Nothing here is written to: user data lives in the data folder (app.config.Paths).
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGED = Path(__file__).resolve().parent / "_data"
SOURCE_TREE = Path(__file__).resolve().parent.parent


def frozen() -> bool:
    """Running from a PyInstaller bundle (sys.executable is Ember itself, not Python)."""
    return bool(getattr(sys, "frozen", False)) and hasattr(sys, "_MEIPASS")


def data_root() -> Path:
    if frozen():
        return Path(sys._MEIPASS)  # type: ignore[attr-defined]
    if (PACKAGED / "models.yaml").is_file():
        return PACKAGED
    return SOURCE_TREE


def registry_file() -> Path:
    """The built-in model registry."""
    return data_root() / "models.yaml"


def asset(name: str) -> Path:
    """A file of `assets/` (it may not exist: callers decide what a missing one means)."""
    return data_root() / "assets" / name


def source_checkout() -> bool:
    """Running from a source tree (a checkout or an editable install), where `pip install -e`
    is the way to add an extra."""
    return not frozen() and (SOURCE_TREE / "pyproject.toml").is_file()
