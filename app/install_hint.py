"""What to tell a user whose Ember lacks an optional part (the window, the server, an
engine): the command that adds it to this kind of install, or, in a bundle, which cannot
install anything, that this build does not include it."""

from __future__ import annotations

from app import resources

NOT_IN_BUILD = "not part of this build of Ember"


def install_command(extra: str = "") -> str | None:
    """The pip command that adds `extra` ("" for Ember's own dependencies) here; None in a
    bundle."""
    if resources.frozen():
        return None
    if resources.source_checkout():
        return f"pip install -e '.[{extra}]'" if extra else "pip install -e ."
    return f"pip install 'ember[{extra}]'" if extra else "pip install --force-reinstall ember"


def needs_extra(what: str, extra: str, missing: str | None) -> str:
    """'the window needs the 'gui' extra (PySide6 is missing): pip install ...', or in a
    bundle 'the window is not part of this build of Ember (PySide6 is missing)'."""
    command = install_command(extra)
    if command is None:
        return f"{what} is {NOT_IN_BUILD} ({missing} is missing)"
    return f"{what} needs the '{extra}' extra ({missing} is missing): {command}"
