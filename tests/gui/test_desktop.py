"""The window as a double-click starts it: its icon and application id, what a failed start
leaves (a crash report and a message box, never a silent exit), the native crash dump, and
the update check (off by default; a newer release shows a notice that does not block)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QMessageBox

from app import __version__
from app.config import Paths
from app.gui import START_FAILED, build_window, main
from app.gui.main_window import MainWindow
from app.gui.settings_dialog import SettingsDialog
from app.identity import APP_ID
from app.runtime import Runtime
from app.store import Store
from tests.support import REPO
from tests.support.feed_server import feed_server
from tests.support.machines import desktop

DESKTOP_FILE = REPO / "packaging" / "linux" / f"{APP_ID}.desktop"
WAIT_MS = 30_000


def when_shown(kind: type, act, tries: int = 400) -> None:
    """Call `act(widget)` once a visible top-level `kind` (or modal box) exists."""
    def poll(left: int) -> None:
        modal = QApplication.activeModalWidget()
        found = modal if isinstance(modal, kind) else next(
            (w for w in QApplication.topLevelWidgets() if isinstance(w, kind) and w.isVisible()),
            None)
        if found is not None:
            act(found)
        elif left:
            QTimer.singleShot(50, lambda: poll(left - 1))
    QTimer.singleShot(50, lambda: poll(tries))


def answer_message_box() -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def read(box: QMessageBox) -> None:
        seen.append((box.windowTitle(), box.text()))
        box.accept()
    when_shown(QMessageBox, read)
    return seen


@pytest.fixture
def one_quit(qapp):
    """Closing the window must not post a second Quit beside the test's own: a Quit left
    queued would end the next event loop (a later test's) at once."""
    qapp.setQuitOnLastWindowClosed(False)
    yield
    qapp.setQuitOnLastWindowClosed(True)


def test_the_window_carries_the_icon_and_the_desktop_files_app_id(qtbot, tmp_path, ember_log,
                                                                  one_quit):
    seen: dict[str, object] = {}

    def look(w: MainWindow) -> None:
        image = w.windowIcon().pixmap(16, 16).toImage()
        seen["opaque"] = sum(image.pixelColor(x, y).alpha() > 200
                             for x in range(16) for y in range(16))
        seen["app_id"] = QGuiApplication.desktopFileName()
        seen["name"] = QApplication.applicationName()
        w.close()
        QApplication.quit()
    when_shown(MainWindow, look)
    assert main(home=Paths(tmp_path / "home")) == 0
    # one_quit's setting stands (offscreen has no tray): turned back on, the close would
    # have posted a Quit that ends the next event loop, the next test's message box
    assert not QApplication.quitOnLastWindowClosed()
    assert seen["app_id"] == DESKTOP_FILE.stem == APP_ID  # Wayland matches these
    assert seen["name"] == "Ember"
    assert seen["opaque"] > 150  # the SVG rendered at 16 px, not an empty icon
    assert not list((tmp_path / "home" / "logs").glob("native-*.log"))  # a clean exit


def test_a_history_from_a_newer_ember_stops_the_start_with_a_report_and_a_message(
        qtbot, tmp_path, ember_log):
    home = Paths(tmp_path / "home")
    home.home.mkdir()
    # the user went back to an older Ember: a history from a newer one (WAL, as Ember's are)
    with contextlib.closing(sqlite3.connect(home.history_db, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT)")
        db.execute("INSERT INTO conversations VALUES (1, 'keep me')")
        db.execute("PRAGMA user_version=7")
    before = home.history_db.read_bytes()
    boxes = answer_message_box()
    assert main(home=home) == START_FAILED
    [report] = list(home.logs.glob("crash-*.log"))
    [(title, text)] = boxes
    assert title == "Ember could not start"
    assert "was written by a newer Ember (schema 7); update Ember to open it" in text
    assert str(report) in text
    body = report.read_text(encoding="utf-8")
    assert f"Ember {__version__}" in body and "platform: " in body and "frozen: no" in body
    assert f"python: {sys.version.split()[0]}" in body
    assert "Traceback (most recent call last)" in body and "HistoryError" in body
    assert home.history_db.read_bytes() == before  # the user's conversations, untouched
    assert "the window could not start" in ember_log.read_text(encoding="utf-8")


def test_a_qt_binding_that_leaks_references_stops_the_start_with_the_way_out(
        qtbot, tmp_path, monkeypatch, ember_log):
    """PySide6 6.12.0 aborted the window seconds into its first download (issue 35): such a
    binding is refused at start, with a message and a report, before anything is lost."""
    from app.gui import qt_check

    monkeypatch.setattr(qt_check, "emit_reference_drift", lambda: qt_check.PROBE_EMITS)
    home = Paths(tmp_path / "home")
    boxes = answer_message_box()
    assert main(home=home) == START_FAILED
    [(title, text)] = boxes
    assert title == "Ember could not start"
    assert "has a reference-count bug in Signal.emit" in text
    assert "pip install 'PySide6-Essentials==6.11.3'" in text
    [report] = list(home.logs.glob("crash-*.log"))
    assert "BrokenQtBindingError" in report.read_text(encoding="utf-8")


def test_a_data_folder_that_is_not_a_folder_reports_into_the_temporary_folder(
        qtbot, tmp_path, monkeypatch, ember_log):
    not_a_folder = tmp_path / "ember-data"
    not_a_folder.write_text("a file where the data folder should be")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    boxes = answer_message_box()
    assert main(home=Paths(not_a_folder)) == START_FAILED
    [report] = list((tmp_path / "tmp").glob("ember-crash-*.log"))
    [(_, text)] = boxes
    assert str(report) in text and str(not_a_folder) in text  # what failed, and where
    assert f"data folder: {not_a_folder}" in report.read_text(encoding="utf-8")
    assert not_a_folder.read_text() == "a file where the data folder should be"


def start_window(home: Path) -> subprocess.Popen:
    env = {**os.environ, "EMBER_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
    env.pop("PYTHONFAULTHANDLER", None)  # the app's own handler, as on a desktop
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "gui"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    # this process's own dump file (app.crash.NativeCrashLog, made before the history): a
    # history.db left by an earlier start says nothing about this one
    while not (list((home / "logs").glob(f"native-*-{proc.pid}.log"))
               and (home / "history.db").exists()):
        assert proc.poll() is None and time.monotonic() < deadline, "the window did not start"
        time.sleep(0.1)
    time.sleep(1.0)  # past start-up, into the event loop
    return proc


def test_a_native_crash_of_the_window_leaves_a_dump_and_a_kill_leaves_nothing(tmp_path):
    home = tmp_path / "home"
    killed = start_window(home)
    killed.send_signal(signal.SIGKILL)  # no exit code runs: its empty dump file stays...
    killed.wait(10)
    assert [p.name for p in (home / "logs").glob("native-*.log")] != []
    crashed = start_window(home)  # ...until the next start removes it
    crashed.send_signal(signal.SIGSEGV)  # as a segfault in Qt or a driver would
    assert crashed.wait(30) == -signal.SIGSEGV
    dumps = list((home / "logs").glob("native-*.log"))
    assert len(dumps) == 1, [(p.name, p.read_text(encoding="utf-8")) for p in dumps]
    [dump] = dumps
    text = dump.read_text(encoding="utf-8")
    assert dump.name.endswith(f"-{crashed.pid}.log")
    assert "Fatal Python error: Segmentation fault" in text and f"Ember {__version__}" in text
    assert "File " in text  # the Python stack of the thread that crashed


def test_a_bundle_without_qt_leaves_a_report_when_the_window_is_asked_for(tmp_path):
    # PySide6 unimportable, as in a bundle that left it out: `ember gui` (the .desktop's Exec)
    script = "import sys; sys.modules['PySide6'] = None; from app.cli import main; main()"
    env = {**os.environ, "EMBER_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", script, "gui"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    [report] = list((tmp_path / "home" / "logs").glob("crash-*.log"))
    assert done.returncode == 1 and f"(report: {report})" in done.stderr
    assert "ModuleNotFoundError: No module named 'PySide6.QtWidgets'" in report.read_text(
        encoding="utf-8")


@pytest.fixture
def window_on(qtbot, tmp_path):
    runtimes: list[Runtime] = []

    def make(config: str) -> MainWindow:
        home = Paths(tmp_path / "home")
        home.home.mkdir(exist_ok=True)
        home.config_file.write_text(config, encoding="utf-8")
        rt = Runtime(store=Store(home), hardware=desktop())
        runtimes.append(rt)
        w = build_window(home=home, runtime=rt)
        qtbot.addWidget(w)
        w.show()
        return w
    yield make
    for rt in runtimes:
        rt.shutdown()


def test_the_update_check_is_off_unless_switched_on(window_on):
    with feed_server() as feed:
        feed.body = json.dumps({"version": "99.0", "url": "https://example.org/99"}).encode()
        w = window_on(f'[app]\nupdate_feed = "{feed.url}"\n')
        time.sleep(0.5)
        assert w.update_notice.task is None and feed.requests == []
        assert not w.update_notice.isVisible()


def test_a_newer_release_shows_a_notice_and_the_window_stays_usable(qtbot, window_on):
    with feed_server() as feed:
        feed.body = json.dumps({"tag_name": "v99.0.1", "html_url":
                                "https://github.com/ember-app/ember/releases/tag/v99.0.1"}).encode()
        feed.hold = threading.Event()  # a slow feed, answering once the window is up
        w = window_on(f'[app]\nupdate_check = true\nupdate_feed = "{feed.url}"\n')
        assert feed.answered == 0  # the window did not wait for the feed (HOLD_S)
        feed.hold.set()
        qtbot.waitUntil(w.update_notice.isVisible, timeout=WAIT_MS)
    text = w.update_notice.text()
    assert text.startswith("Ember 99.0.1 is available")
    assert 'href="https://github.com/ember-app/ember/releases/tag/v99.0.1"' in text
    assert QApplication.activeModalWidget() is None  # a notice, not a dialog


def test_switching_the_check_on_in_settings_saves_it_and_checks_at_once(qtbot, window_on):
    with feed_server() as feed:
        feed.body = json.dumps({"version": "99.0", "url": "https://example.org/99"}).encode()
        w = window_on(f'[app]\nupdate_feed = "{feed.url}"\n')
        dialog = SettingsDialog(w.settings, w.runtime.hardware, "", [],
                                home=w.home)
        qtbot.addWidget(dialog)
        assert not dialog.update_check.isChecked()
        dialog.update_check.click()
        w.apply_settings(dialog.result_settings(), "")
        qtbot.waitUntil(w.update_notice.isVisible, timeout=WAIT_MS)
        assert len(feed.requests) == 1
    config = w.home.config_file.read_text(encoding="utf-8")
    assert "update_check = true" in config and feed.url in config
