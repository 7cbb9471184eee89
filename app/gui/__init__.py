"""Ember's desktop window (PySide6). `ember` with no command opens it."""

from __future__ import annotations

import sys

from app.config import Paths, paths


def build_window(home: Paths | None = None, runtime=None, hardware=None):
    """The main window on EMBER_HOME (or `home`), with its Runtime, history and settings."""
    from app.errors import ConfigError
    from app.gui.main_window import MainWindow
    from app.history import History
    from app.preferences import Settings, load_settings
    from app.runtime import Runtime
    from app.store import Store

    p = home or paths()
    try:
        settings, error = load_settings(p), ""
    except ConfigError as e:
        settings, error = Settings(), str(e)
    if runtime is None:
        runtime = Runtime(store=Store(p), hardware=hardware)
    return MainWindow(runtime, History(p.history_db), settings, p, error)


def main(argv: list[str] | None = None) -> int:
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app import logs
    from app.gui.theme import apply_theme

    logs.setup()  # once per process: a no-op under the `ember` command, which already did
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    app.setApplicationName("Ember")
    window = build_window()
    apply_theme(app, window.settings.theme, window.settings.font_size)
    if window.settings_error:
        QMessageBox.warning(window, "Ember", f"{window.settings_error}\n\nEmber runs with "
                            "default settings and will not overwrite the file.")
    window.show()
    try:
        return app.exec()
    finally:
        window.runtime.shutdown()
        window.history.close()
