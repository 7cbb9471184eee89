"""The tray icon's menu and the window's tray settings (pytest-qt, offscreen Qt, a Runtime of
its own on the real Qwen2.5-Coder-0.5B so that Unload leaves the shared one loaded). The
offscreen platform has no tray, so the window makes none: these tests make the icon the
window would (MainWindow.make_tray); tests/gui/test_tray_xcb.py shows it in a real tray."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.autostart import desktop_exec, launch_command
from app.config import Paths
from app.gui import build_window
from app.gui.main_window import MainWindow
from app.gui.settings_dialog import SettingsDialog
from app.gui.tray import TrayIcon
from app.identity import APP_ID
from app.preferences import load_settings
from app.runtime import Runtime
from app.store import InstalledModel, Store

WAIT_MS = 60_000


@pytest.fixture
def own_runtime(store: Store) -> Iterator[Runtime]:
    with Runtime(store=store) as rt:
        yield rt


@pytest.fixture
def window(qtbot, own_runtime: Runtime, tmp_path: Path) -> Iterator[MainWindow]:
    w = build_window(home=Paths(tmp_path / "home"), runtime=own_runtime)
    qtbot.addWidget(w)
    w.show()
    yield w
    w.quit_app()  # a window kept in the tray closes for good


def texts(menu: QMenu) -> list[str]:
    return [a.text() for a in menu.actions() if not a.isSeparator()]


def action(menu: QMenu, text: str):
    return next(a for a in menu.actions() if a.text() == text)


def with_tray(w: MainWindow) -> TrayIcon:
    return w.add_tray()


def test_offscreen_has_no_tray_so_the_window_makes_none_and_close_closes(
        window: MainWindow) -> None:
    assert not QSystemTrayIcon.isSystemTrayAvailable()
    assert window.tray is None
    window.settings.keep_in_tray = True  # asked for, but there is no tray to keep it in
    window.close()
    assert not window.isVisible() and not window.keeps_in_tray()


def test_menu_lists_each_loaded_model_with_its_memory_and_unloads_it(
        qtbot, window: MainWindow, own_runtime: Runtime, qwen: InstalledModel) -> None:
    tray = with_tray(window)
    assert texts(tray.menu) == ["Server: stopped", "No model loaded", "Open Ember",
                                "Start server", "Quit"]
    # loaded behind the tray's back (as the API server would): the status line's next probe
    # rebuilds the menu, without it being opened
    planned = own_runtime.load(qwen.ref, context=2048).plan.memory_bytes
    qtbot.waitUntil(lambda: qwen.ref in tray.toolTip(), timeout=WAIT_MS)
    tray.menu.aboutToShow.emit()  # opening it rebuilds it too
    line = f"{qwen.ref} ({planned / 1e6:.0f} MB, llamacpp)"
    assert texts(tray.menu) == ["Server: stopped", line, "Open Ember", "Start server", "Quit"]
    assert tray.toolTip() == f"Ember\nServer: stopped\n{line}"
    model_menu = action(tray.menu, line).menu()
    assert isinstance(model_menu, QMenu) and texts(model_menu) == ["Unload"]
    action(model_menu, "Unload").trigger()
    qtbot.waitUntil(lambda: "No model loaded" in texts(tray.menu), timeout=WAIT_MS)
    assert own_runtime.loaded() == []
    assert tray.toolTip() == "Ember\nServer: stopped\nNo model loaded"


def test_menu_starts_and_stops_the_windows_server_and_shows_its_address(
        qtbot, window: MainWindow) -> None:
    tray = with_tray(window)
    action(tray.menu, "Start server").trigger()
    qtbot.waitUntil(lambda: bool(window.server_page.url_now), timeout=WAIT_MS)
    url = window.server_page.url_now
    assert url.startswith("http://127.0.0.1:")
    assert texts(tray.menu)[0] == f"Server: running at {url}"
    assert "Stop server" in texts(tray.menu) and url in tray.toolTip()
    action(tray.menu, "Stop server").trigger()
    assert texts(tray.menu)[0] == "Server: stopped" and window.server is None
    assert "Start server" in texts(tray.menu)


def test_keep_in_tray_hides_on_close_keeps_serving_and_quit_quits(
        qtbot, window: MainWindow) -> None:
    tray = with_tray(window)
    window.settings.keep_in_tray = True
    window.toggle_server()
    qtbot.waitUntil(lambda: bool(window.server_page.url_now), timeout=WAIT_MS)
    url = window.server_page.url_now
    window.close()
    assert window.isHidden() and tray.isVisible()
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # still serving
    action(tray.menu, "Open Ember").trigger()
    assert window.isVisible()
    window.close()
    assert window.isHidden()
    action(tray.menu, "Quit").trigger()
    assert window.quitting and not tray.isVisible()
    with pytest.raises(httpx.ConnectError):  # the server stopped with the window
        httpx.get(f"{url}/health", timeout=10)


def test_settings_offer_tray_and_login_off_by_default_and_save_writes_the_entry(
        qtbot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = tmp_path / "config" / "autostart" / f"{APP_ID}.desktop"
    dialog = SettingsDialog(window.settings, window.runtime.hardware, "", [], home=window.home)
    qtbot.addWidget(dialog)
    assert not dialog.keep_in_tray.isChecked() and not dialog.start_at_login.isChecked()
    dialog.keep_in_tray.setChecked(True)
    dialog.start_at_login.setChecked(True)
    window.apply_settings(dialog.result_settings(), "")
    assert entry.is_file() and "--tray" in entry.read_text(encoding="utf-8")
    saved = load_settings(window.home)
    assert saved.keep_in_tray and saved.start_at_login
    entry.write_text("[Desktop Entry]\nExec=/moved/away/ember gui --tray\n")
    again = build_window(home=window.home, runtime=window.runtime)  # the next start
    qtbot.addWidget(again)
    assert f"Exec={desktop_exec(launch_command())}" in entry.read_text(encoding="utf-8")
    again.close()
    dialog.start_at_login.setChecked(False)
    window.apply_settings(dialog.result_settings(), "")
    assert not entry.exists() and not load_settings(window.home).start_at_login


def test_the_menu_follows_the_window_onto_another_runtime(
        qtbot, window: MainWindow, store: Store, qwen: InstalledModel) -> None:
    """Joining (or leaving) a running Ember service swaps the window's Runtime
    (MainWindow.use_runtime): the tray then lists that one's models."""
    tray = with_tray(window)
    with Runtime(store=store) as other:
        other.load(qwen.ref, context=2048)
        assert "No model loaded" in texts(tray.menu)
        window.use_runtime(other)
        qtbot.waitUntil(lambda: any(t.startswith(qwen.ref) for t in texts(tray.menu)),
                        timeout=WAIT_MS)
