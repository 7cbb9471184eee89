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


def test_icon_shows_in_a_real_tray_its_menu_lists_the_model_and_unloads_it(
        qwen: InstalledModel, models_home: Path, tmp_path: Path) -> None:
    home = home_with_model(tmp_path / "home", qwen)
    shutil.copy2(models_home / "hardware.json", home / "hardware.json")  # no first-start probe
    with xvfb() as display, trayer(display):
        env = desktop_env(display, home)
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)  # the XEmbed tray, not a D-Bus one
        run = subprocess.run([sys.executable, "-m", "tests.support.tray_probe", qwen.ref],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    seen = json.loads(lines[-1])
    print(seen)
    assert seen["platform"] == "xcb" and seen["available"] and seen["tray"]
    assert "timed_out_at_step" not in seen, seen
    assert not seen["window_visible_at_start"]  # --tray: the window waits behind the icon
    x, y, width, height = seen["icon"]
    assert seen["icon_visible"] and width > 0 and height > 0 and y < 24  # in trayer's panel
    line = next(t for t in seen["menu"] if t.startswith(qwen.ref))
    assert seen["menu"] == ["Server: stopped", line, "Open Ember", "Start server", "Quit"]
    assert " MB, llamacpp)" in line and seen["model_menu"] == ["Unload"]
    assert line in seen["tooltip"]
    assert seen["loaded_after_unload"] == []
    assert "No model loaded" in seen["menu_after_unload"]
    assert seen["exit"] == 0
