"""Ember's desktop window (PySide6). `ember` with no command opens it.

`main` is what a double-click runs, so it never fails silently: an exception before the window
is shown becomes a crash report in the data folder (app.crash) and a message box naming it,
and the process exits 1; a native crash leaves faulthandler's dump there too.
"""

from __future__ import annotations

import logging
import sys
import time

from app.config import Paths, paths

log = logging.getLogger(__name__)
START_FAILED = 1  # the exit status when the window could not be started
# how long `ember gui --tray` waits for a tray before it shows the window instead: at login
# some desktops start the panel (the tray) after the autostart entries
TRAY_WAIT_S = 30.0


def build_window(home: Paths | None = None, runtime=None, hardware=None):
    """The main window on EMBER_HOME (or `home`), with its Runtime (the running Ember
    service's when one answers, app.runtime.choose), history and settings."""
    from app.documents.library import DocumentLibrary
    from app.errors import ConfigError
    from app.gui.main_window import MainWindow
    from app.history import History
    from app.preferences import Settings, load_settings
    from app.runtime.choose import choose_runtime
    from app.store import Store

    p = home or paths()
    try:
        settings, error = load_settings(p), ""
    except ConfigError as e:
        settings, error = Settings(), str(e)
    if runtime is None:  # a running Ember service's, when one answers; else our own
        runtime = choose_runtime(p, Store(p), hardware)
    history = History(p.history_db)
    # beside the history: the documents attached to its conversations
    library = DocumentLibrary(p.documents_db)
    return MainWindow(runtime, history, settings, p, error, library)


def identify(app) -> None:
    """Name, application id and icon, as the desktop (and Wayland) matches them."""
    from PySide6.QtGui import QIcon

    from app import __version__
    from app.identity import APP_ID, APP_NAME, ICON_SVG, ORGANIZATION

    app.setApplicationName(APP_NAME)
    app.setApplicationDisplayName(APP_NAME)
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationVersion(__version__)
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(QIcon(str(ICON_SVG)))  # Qt's svg icon engine renders each size asked


def main(argv: list[str] | None = None, home: Paths | None = None,
         in_tray: bool = False) -> int:
    """The window's event loop; `in_tray` (`ember gui --tray`, the login entry's): start
    with the window hidden behind its tray icon, where the desktop has a tray."""
    from PySide6.QtWidgets import QApplication

    from app import logs
    from app.crash import NativeCrashLog
    from app.gui.thread_guard import checking_threads, report_thread_crashes

    p = home or paths()
    logs.setup()  # once per process: a no-op under the `ember` command, which already did
    native = NativeCrashLog(p)
    stop_reporting = report_thread_crashes(p)
    guard = watch_threads(p) if checking_threads() else None
    try:
        app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
        quits_on_close = app.quitOnLastWindowClosed()  # start() changes it for a tray
        try:
            try:
                identify(app)
                window = start(app, p, in_tray)
            except Exception as e:
                return start_failed(e, p)
            try:
                return app.exec()
            finally:
                window.runtime.shutdown()
                window.history.close()
                window.library.close()
        finally:
            # the app as it was found: a QApplication outlives main() where it is reused
            app.setQuitOnLastWindowClosed(quits_on_close)
    finally:
        if guard is not None:
            guard.uninstall()
        stop_reporting()
        native.close()


def watch_threads(home: Paths):
    """EMBER_CHECK_THREADS: a worker thread's call into a Qt object leaves a crash report."""
    from app.crash import write_crash_log
    from app.gui.thread_guard import WindowThreadGuard

    guard = WindowThreadGuard(
        lambda error: write_crash_log(error, home, when="a worker thread's call into the window"))
    guard.install()
    return guard


def start(app, home: Paths, in_tray: bool = False):
    from PySide6.QtWidgets import QMessageBox

    from app.gui.first_start import hardware_behind_splash
    from app.gui.qt_check import check_qt_binding
    from app.gui.theme import apply_theme

    check_qt_binding()  # a binding that would abort mid-download stops here, with a message
    window = build_window(home, hardware=hardware_behind_splash(app))
    apply_theme(app, window.settings.theme, window.settings.font_size)
    if window.settings_error:
        QMessageBox.warning(window, "Ember", f"{window.settings_error}\n\nEmber runs with "
                            "default settings and will not overwrite the file.")
    # with a tray icon, Ember ends by Quit or by closing the window (MainWindow.closeEvent),
    # not when its last window closes: that would be any dialog closed while it is hidden.
    # Without one the app's own setting stands: setting it True here would make a close post
    # a Quit event beside the caller's quit(), and one left queued ends the next event loop
    if window.tray is not None:
        app.setQuitOnLastWindowClosed(False)
    if not in_tray:
        window.show()
    elif window.tray is None:
        wait_for_tray(app, window)
    return window


def wait_for_tray(app, window, wait_s: float | None = None) -> None:
    """Hidden until a tray comes up, then behind its icon; after `wait_s` (TRAY_WAIT_S)
    without one, the window shows (Ember never runs with nothing on screen)."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QSystemTrayIcon

    wait_s = TRAY_WAIT_S if wait_s is None else wait_s
    started = time.monotonic()
    timer = QTimer(window, interval=250)

    def look() -> None:
        if QSystemTrayIcon.isSystemTrayAvailable():
            timer.stop()
            window.add_tray()
            app.setQuitOnLastWindowClosed(False)
            log.info("the tray came up %.1f s after the window", time.monotonic() - started)
        elif time.monotonic() - started >= wait_s:
            timer.stop()
            log.info("no tray after %.0f s: showing the window", wait_s)
            window.show()

    timer.timeout.connect(look)
    timer.start()


def start_failed(error: Exception, home: Paths) -> int:
    """Report a start-up failure where a double-click user sees it, and where it lasts."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QMessageBox

    from app.crash import write_crash_log
    from backends.errors import EmberError

    log.error("the window could not start", exc_info=error)
    what = str(error) if isinstance(error, EmberError) else f"{type(error).__name__}: {error}"
    try:
        where = f"A report was saved to\n{write_crash_log(error, home)}"
    except OSError as e:
        where = f"No report could be saved ({e})."
    print(f"ember: could not start: {what}\n{where}", file=sys.stderr)
    box = QMessageBox(QMessageBox.Icon.Critical, "Ember could not start",
                      f"Ember could not start:\n\n{what}\n\n{where}")
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    box.exec()
    return START_FAILED
