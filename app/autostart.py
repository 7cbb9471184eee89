"""Start Ember at login: the one entry each desktop reads, made by one function
(`login_entry`) and written or removed by another (`set_start_at_login`).

- Linux: an XDG autostart entry, `$XDG_CONFIG_HOME/autostart/<app id>.desktop` (the XDG
  Autostart spec; desktop-file-validate checks it in the tests).
- macOS: a LaunchAgent, `~/Library/LaunchAgents/<app id>.plist` with RunAtLoad, which launchd
  runs at login (launchd.plist(5)); no helper app or ServiceManagement needed.
- Windows: a value named Ember under HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run.

Each starts `ember gui --tray`: the window opens hidden behind its tray icon where the desktop
has a tray (app.gui.tray), and shown where it has none. Which platform's entry is written is
decided when `set_start_at_login` is called, never at import, so every entry is generated and
checked on any machine.
"""

from __future__ import annotations

import contextlib
import os
import plistlib
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app.identity import APP_ID, APP_NAME, WM_CLASS

RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
TRAY_FLAG = "--tray"


@dataclass(frozen=True)
class LoginEntry:
    """What starts Ember at login on one platform: a file (`path`, `content`) on Linux and
    macOS, a registry value (`value_name` = `content`, under HKCU's `RUN_KEY`) on Windows."""
    system: str  # "linux", "darwin" or "win32"
    content: str
    path: Path | None = None
    value_name: str = ""


def launch_command(executable: str | None = None, frozen: bool | None = None,
                   environ: Mapping[str, str] | None = None) -> list[str]:
    """How to start Ember's window from a login session: the AppImage file itself (the
    bundle inside is mounted afresh at each run, under a new path), the bundle's window
    binary when frozen (PyInstaller; on Windows Ember.exe, not its console twin ember-cli.exe,
    which would open a console at login), else the `ember` script of this environment, else
    this Python on app.cli."""
    executable = executable or sys.executable
    frozen = getattr(sys, "frozen", False) if frozen is None else frozen
    environ = os.environ if environ is None else environ
    if frozen and environ.get("APPIMAGE"):
        return [environ["APPIMAGE"], "gui", TRAY_FLAG]
    if frozen:
        window = Path(executable).with_name("Ember.exe")
        if Path(executable).name.lower() == "ember-cli.exe" and window.is_file():
            executable = str(window)
        return [executable, "gui", TRAY_FLAG]
    script = Path(executable).with_name("ember.exe" if os.name == "nt" else "ember")
    if script.is_file():
        return [str(script), "gui", TRAY_FLAG]
    found = shutil.which("ember")
    if found:
        return [found, "gui", TRAY_FLAG]
    return [executable, "-m", "app.cli", "gui", TRAY_FLAG]


def desktop_exec(argv: list[str]) -> str:
    """`argv` as a .desktop Exec value: an argument with a reserved character is put in
    double quotes, with `"`, `` ` ``, `$` and `\\` escaped inside them, and `%` doubled (the
    Desktop Entry spec, "The Exec key")."""
    reserved = set(" \t\n\"'\\><~|&;$*?#()`")
    out = []
    for arg in argv:
        arg = arg.replace("%", "%%")
        if any(c in reserved for c in arg):
            arg = '"' + "".join("\\" + c if c in '"`$\\' else c for c in arg) + '"'
        out.append(arg)
    return " ".join(out)


def _xdg_config_home(home: Path) -> Path:
    configured = os.environ.get("XDG_CONFIG_HOME", "")
    return Path(configured) if os.path.isabs(configured) else home / ".config"


def login_entry(system: str, command: list[str] | None = None,
                home: Path | None = None) -> LoginEntry:
    """The login entry for `system` (sys.platform's value) that runs `command`."""
    argv = command or launch_command()
    home = home or Path.home()
    if system.startswith("linux"):
        # X-GNOME-Autostart-enabled: GNOME's switch for the entry (true: it runs); KDE and
        # the others run every entry without Hidden=true
        content = "\n".join([
            "[Desktop Entry]", "Type=Application", f"Name={APP_NAME}",
            "Comment=Ember in the tray at login, with its local API server a click away",
            f"Exec={desktop_exec(argv)}", f"Icon={APP_ID}", "Terminal=false",
            f"StartupWMClass={WM_CLASS}", "X-GNOME-Autostart-enabled=true", ""])
        return LoginEntry("linux", content, _xdg_config_home(home) / "autostart"
                          / f"{APP_ID}.desktop")
    if system == "darwin":
        plist = {"Label": APP_ID, "ProgramArguments": argv, "RunAtLoad": True,
                 "ProcessType": "Interactive"}
        content = plistlib.dumps(plist).decode("utf-8")
        return LoginEntry("darwin", content,
                          home / "Library" / "LaunchAgents" / f"{APP_ID}.plist")
    if system == "win32":
        return LoginEntry("win32", subprocess.list2cmdline(argv), value_name=APP_NAME)
    raise ValueError(f"no login entry for the platform {system!r}")


def set_start_at_login(on: bool, system: str | None = None,
                       command: list[str] | None = None, home: Path | None = None) -> LoginEntry:
    """Write (`on`) or remove the login entry of this platform; returns it. Removing an entry
    that is not there is not an error. OSError when it cannot be written."""
    entry = login_entry(system or sys.platform, command, home)
    if entry.path is not None:
        if on:
            entry.path.parent.mkdir(parents=True, exist_ok=True)
            part = entry.path.with_name(entry.path.name + ".part")
            part.write_text(entry.content, encoding="utf-8")
            os.replace(part, entry.path)  # a login never reads half a file
        else:
            entry.path.unlink(missing_ok=True)
    else:
        _set_run_value(entry, on)
    return entry


def _set_run_value(entry: LoginEntry, on: bool) -> None:
    import winreg  # Windows only: reached only when the platform is win32

    with winreg.OpenKey(winreg.HKEY_CURRENT_USER, RUN_KEY, 0,  # type: ignore[attr-defined]
                        winreg.KEY_SET_VALUE) as key:  # type: ignore[attr-defined]
        if on:
            winreg.SetValueEx(key, entry.value_name, 0,  # type: ignore[attr-defined]
                              winreg.REG_SZ, entry.content)  # type: ignore[attr-defined]
        else:
            with contextlib.suppress(FileNotFoundError):  # already off
                winreg.DeleteValue(key, entry.value_name)  # type: ignore[attr-defined]

