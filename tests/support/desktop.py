"""A real X server for window tests: Xvfb, the window found and typed into with xdotool, and
screenshots with ImageMagick's `import` (Debian: xvfb, xdotool, imagemagick; .ci/run installs
them). Unlike QT_QPA_PLATFORM=offscreen, this loads Qt's xcb platform plugin and its system
libraries, as a user's desktop does."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.store import InstalledModel

# The main window's title; a first start shows a splash first ("Ember: first start"), same
# window class, that takes no typing.
MAIN_WINDOW = "^Ember$"


@contextmanager
def xvfb(size: str = "1280x800x24") -> Iterator[str]:
    """A fresh Xvfb; yields its DISPLAY (":N")."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", size,
                             "-nolisten", "tcp"], pass_fds=(write_fd,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        number = f.readline().strip()
    try:
        if not number:
            raise RuntimeError("Xvfb did not start")
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(10)


def desktop_env(display: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of an app started from a desktop: a DISPLAY, no QT_QPA_PLATFORM."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "EMBER_HOME")}
    env.update(DISPLAY=display, EMBER_HOME=str(home), **extra)
    return env


def _printed(process: subprocess.Popen) -> str:
    """What an exited process wrote to its pipe (stdout, with stderr where it was joined)."""
    stream = process.stdout
    if stream is None:
        return ""
    data = stream.read()
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


def find_window(display: str, wm_class: str, timeout: float = 60,
                title: str | None = None,
                owner: subprocess.Popen | None = None) -> tuple[str, float]:
    """The id of the first visible window of `wm_class` (and whose title matches the regular
    expression `title`), and how long it took to appear. With `owner` (the app's process),
    its exit ends the wait at once; TimeoutError then names its exit code and the windows
    that were there."""
    env = {**os.environ, "DISPLAY": display}
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if owner is not None and owner.poll() is not None:
            raise TimeoutError(f"the app exited ({owner.returncode}) before a window of class "
                               f"{wm_class!r}{f' titled {title!r}' if title else ''} showed; "
                               f"windows: {_window_names(env, wm_class)}; what it printed, "
                               f"last part: {_printed(owner)[-4000:]!r}")
        out = subprocess.run(["xdotool", "search", "--onlyvisible", "--class", wm_class],
                             env=env, capture_output=True, text=True)
        for window in out.stdout.split():
            if title is None or re.search(title, _window_name(env, window)):
                return window, time.monotonic() - started
        time.sleep(0.05)
    raise TimeoutError(f"no window of class {wm_class!r}"
                       f"{f' titled {title!r}' if title else ''} within {timeout} s; "
                       f"windows of that class: {_window_names(env, wm_class)}")


def _window_names(env: dict[str, str], wm_class: str) -> list[str]:
    """The titles of every window (visible or not) of `wm_class`, for a failure message."""
    ids = subprocess.run(["xdotool", "search", "--class", wm_class], env=env,
                         capture_output=True, text=True).stdout.split()
    return [_window_name(env, i).strip() for i in ids]


def _window_name(env: dict[str, str], window: str) -> str:
    return subprocess.run(["xdotool", "getwindowname", window], env=env, capture_output=True,
                          text=True).stdout


def wm_class(display: str, window: str) -> str:
    out = subprocess.run(["xprop", "-id", window, "WM_CLASS"], capture_output=True, text=True,
                         env={**os.environ, "DISPLAY": display}, check=True)
    return out.stdout.split("=", 1)[1].strip()


def type_text(display: str, window: str, text: str) -> None:
    """Type `text` into the window's focused widget, then press Return (XTEST key events, as
    a keyboard would send them; Xvfb has no window manager, so the window is focused first)."""
    env = {**os.environ, "DISPLAY": display}
    subprocess.run(["xdotool", "windowfocus", "--sync", window], env=env, check=True,
                   capture_output=True)
    subprocess.run(["xdotool", "type", "--delay", "20", text], env=env, check=True,
                   capture_output=True)
    subprocess.run(["xdotool", "key", "Return"], env=env, check=True, capture_output=True)


def screenshot(display: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["import", "-window", "root", str(path)], check=True,
                   env={**os.environ, "DISPLAY": display}, capture_output=True)
    return path


def wait_for_answer(history_db: Path, prompt: str, timeout: float = 120) -> str:
    """The assistant's stored answer to `prompt` in history.db, once it is complete."""
    deadline = time.monotonic() + timeout
    seen: list[tuple[str, str, str]] = []
    while time.monotonic() < deadline:
        if history_db.exists():
            try:
                with sqlite3.connect(f"file:{history_db}?mode=ro", uri=True, timeout=1) as db:
                    seen = db.execute("SELECT role, content, status FROM messages "
                                      "ORDER BY id").fetchall()
            except sqlite3.Error:
                seen = []
            asked = [i for i, (role, content, _) in enumerate(seen)
                     if role == "user" and content == prompt]
            if asked:
                for role, content, status in seen[asked[0] + 1:]:
                    if role == "assistant" and status != "streaming":
                        if status != "complete":
                            raise AssertionError(f"the answer ended {status}: {content!r}")
                        return content
        time.sleep(0.5)
    raise TimeoutError(f"no complete answer to {prompt!r} in {history_db} within {timeout} s "
                       f"(messages: {seen!r})")


def home_with_model(home: Path, model: InstalledModel, seen_as: Path | None = None) -> Path:
    """A fresh EMBER_HOME holding `model` only (hard links, no copy of the weights).
    `seen_as`: where the home will be seen by the app (inside a chroot), for the manifest."""
    folder = home / "models" / "ember" / model.id
    folder.mkdir(parents=True)
    target = folder / model.path.name
    try:
        os.link(model.path, target)
    except OSError:
        shutil.copy2(model.path, target)
    inside = (seen_as or home) / "models" / "ember" / model.id / model.path.name
    manifest = {**model.to_json(), "path": str(inside)}
    (folder / (model.path.name + ".ember.json")).write_text(json.dumps(manifest, indent=2))
    return home
