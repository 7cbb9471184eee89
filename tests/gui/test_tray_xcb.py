"""The tray icon in a real tray: Xvfb with trayer as the tray host (Xvfb alone has none, and
Qt then makes no icon), Ember started as `ember gui --tray` starts it, the real
Qwen2.5-Coder-0.5B loaded. tests/support/tray_probe.py drives it from inside: the icon is
embedded by the host, a right click where it sits opens its menu, which lists the model;
Unload there unloads it, and Quit ends Ember."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from app.store import InstalledModel
from tests.support import REPO
from tests.support.desktop import desktop_env, home_with_model, xvfb


@contextmanager
def trayer(display: str) -> Iterator[None]:
    """trayer (Debian: trayer) as the screen's tray: it owns _NET_SYSTEM_TRAY_S0, which Qt's
    xcb platform asks for (QSystemTrayIcon.isSystemTrayAvailable) and embeds its icon into
    (the XEmbed system tray protocol). It takes the selection before it maps its panel."""
    env = {**os.environ, "DISPLAY": display}
    host = subprocess.Popen(["trayer", "--edge", "top", "--align", "right", "--widthtype",
                             "request", "--height", "24"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not panel_shown(env):
            assert host.poll() is None, f"trayer exited ({host.returncode})"
            assert time.monotonic() < deadline, "trayer showed no panel in 20 s"
            time.sleep(0.1)
        yield
    finally:
        host.terminate()
        host.wait(10)


def panel_shown(env: dict[str, str]) -> bool:
    tree = subprocess.run(["xwininfo", "-root", "-tree"], env=env, capture_output=True,
                          text=True).stdout
    return '"panel": ("panel" "trayer")' in tree


def start_in_tray(home: Path, display: str, ref: str,
                  wait_s: float) -> tuple[subprocess.Popen, dict]:
    """`ember gui --tray` under the probe; returns it and what it saw once started."""
    env = desktop_env(display, home)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)  # the XEmbed tray, not a D-Bus one
    probe = subprocess.Popen([sys.executable, "-m", "tests.support.tray_probe", ref,
                              str(wait_s)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    assert probe.stdout is not None
    printed = []
    for line in probe.stdout:
        printed.append(line)
        if line.startswith('{"phase": "started"'):
            return probe, json.loads(line)
    probe.wait(10)
    raise AssertionError(f"the probe exited ({probe.returncode}): {''.join(printed)[-4000:]}")


def finished(probe: subprocess.Popen) -> dict:
    out, _ = probe.communicate(timeout=180)
    lines = [line for line in out.splitlines() if line.startswith('{"phase": "end"')]
    assert probe.returncode == 0 and lines, out[-4000:]
    seen = json.loads(lines[-1])
    assert "timed_out_at_step" not in seen, (seen, out[-3000:])
    return seen


@pytest.fixture
def home(qwen: InstalledModel, models_home: Path, tmp_path: Path) -> Path:
    home = home_with_model(tmp_path / "home", qwen)
    shutil.copy2(models_home / "hardware.json", home / "hardware.json")  # no first-start probe
    return home


def check_menu_and_unload(seen: dict, ref: str) -> None:
    assert seen["done"] == ["icon_placed", "model_listed", "menu_opened", "unloaded",
                            "menu_followed"]
    x, y, width, height = seen["icon"]
    assert seen["icon_visible"] and x > 0 and y < 24 and width > 0 and height > 0  # in the panel
    assert not seen["window_visible_with_tray"]  # --tray: the window waits behind the icon
    line = next(t for t in seen["menu"] if t.startswith(ref))
    assert seen["menu"] == ["Server: stopped", line, "Open Ember", "Start server", "Quit"]
    assert " MB, llamacpp)" in line and seen["model_menu"] == ["Unload"]
    assert line in seen["tooltip"]
    assert "No model loaded" in seen["menu_after_unload"]
    assert seen["exit"] == 0  # Quit ended the event loop


def test_icon_shows_in_a_real_tray_its_menu_lists_the_model_and_unloads_it(
        qwen: InstalledModel, home: Path) -> None:
    with xvfb() as display, trayer(display):
        probe, at_start = start_in_tray(home, display, qwen.ref, 30)
        seen = finished(probe)
    assert at_start["platform"] == "xcb" and at_start["available"] and at_start["tray"]
    assert not at_start["window_visible"]
    check_menu_and_unload(seen, qwen.ref)


def test_a_tray_that_comes_up_after_ember_gets_the_icon_and_the_window_stays_hidden(
        qwen: InstalledModel, home: Path) -> None:
    """At login the panel may start after Ember's autostart entry."""
    with xvfb() as display:
        probe, at_start = start_in_tray(home, display, qwen.ref, 30)
        assert not at_start["available"] and not at_start["tray"]
        assert not at_start["window_visible"]
        time.sleep(1)
        with trayer(display):
            seen = finished(probe)
    assert seen["hidden_while_waiting"]
    check_menu_and_unload(seen, qwen.ref)


def test_without_a_tray_the_window_shows_after_the_wait(
        qwen: InstalledModel, home: Path) -> None:
    with xvfb() as display:
        probe, at_start = start_in_tray(home, display, qwen.ref, 1.5)
        seen = finished(probe)
    assert not at_start["tray"] and not at_start["window_visible"]
    assert seen["shown_without_tray"] and seen["exit"] == 0
