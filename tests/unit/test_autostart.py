"""Start at login (app/autostart.py): the XDG autostart entry written, valid to
desktop-file-validate and removed again; the macOS LaunchAgent and the Windows Run value as
they would be written (generated here; only Linux's is installed by these tests)."""

from __future__ import annotations

import plistlib
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from app import autostart
from app.autostart import desktop_exec, launch_command, login_entry, set_start_at_login
from app.cli import gui
from app.identity import APP_ID

SPACED = ["/opt/My Apps/ember", "gui", "--tray"]


def validate(path: Path) -> str:
    """desktop-file-validate's complaints about `path` ("" when there are none)."""
    run = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
    return (run.stdout + run.stderr).strip() if run.returncode or run.stdout.strip() else ""


def test_linux_entry_is_written_valid_under_xdg_config_home_and_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = set_start_at_login(True, system="linux", home=tmp_path / "home")
    path = tmp_path / "config" / "autostart" / f"{APP_ID}.desktop"
    assert entry.path == path and path.read_text(encoding="utf-8") == entry.content
    assert validate(path) == ""
    exec_line = next(line for line in entry.content.splitlines() if line.startswith("Exec="))
    assert shlex.split(exec_line[5:]) == launch_command()
    assert not list(path.parent.glob("*.part"))  # written through a temporary file
    set_start_at_login(False, system="linux", home=tmp_path / "home")
    assert not path.exists()
    set_start_at_login(False, system="linux", home=tmp_path / "home")  # already off: fine


def test_linux_entry_defaults_to_dot_config_without_xdg_config_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    entry = login_entry("linux", SPACED, tmp_path)
    assert entry.path == tmp_path / ".config" / "autostart" / f"{APP_ID}.desktop"


def test_exec_quotes_a_path_with_spaces_and_reserved_characters(tmp_path: Path) -> None:
    argv = ['/opt/My "Apps"/$HOME/ember', "gui", "--tray", "100%"]
    line = desktop_exec(argv)
    assert line == r'"/opt/My \"Apps\"/\$HOME/ember" gui --tray 100%%'
    entry = login_entry("linux", argv, tmp_path)
    assert entry.path is not None
    entry.path.parent.mkdir(parents=True)
    entry.path.write_text(entry.content, encoding="utf-8")
    assert validate(entry.path) == ""


def test_launch_command_is_this_environments_ember_with_the_tray_flag() -> None:
    command = launch_command()
    assert command[-2:] == ["gui", "--tray"]
    assert Path(command[0]).parent == Path(sys.executable).parent  # .venv/bin/ember
    # the flag it passes is one `ember gui` takes
    assert gui.make_context("gui", command[-1:]).params == {"in_tray": True}


def test_an_appimage_starts_itself_not_the_mount_it_runs_from(tmp_path: Path) -> None:
    mounted = "/tmp/.mount_EmberXYZ/usr/lib/ember/ember"  # a new path at every run
    assert launch_command(mounted, frozen=True, environ={"APPIMAGE": "/home/u/Ember.AppImage"}
                          ) == ["/home/u/Ember.AppImage", "gui", "--tray"]
    assert launch_command(mounted, frozen=True, environ={}) == [mounted, "gui", "--tray"]


def test_windows_bundle_starts_its_window_binary_not_the_console_twin(tmp_path: Path) -> None:
    for name in ("Ember.exe", "ember-cli.exe"):
        (tmp_path / name).write_bytes(b"")
    expected = [str(tmp_path / "Ember.exe"), "gui", "--tray"]
    assert launch_command(str(tmp_path / "ember-cli.exe"), frozen=True, environ={}) == expected
    assert launch_command(str(tmp_path / "Ember.exe"), frozen=True, environ={}) == expected


def test_macos_launch_agent_runs_the_command_at_load(tmp_path: Path) -> None:
    entry = set_start_at_login(True, system="darwin", command=SPACED, home=tmp_path)
    assert entry.path == tmp_path / "Library" / "LaunchAgents" / f"{APP_ID}.plist"
    plist = plistlib.loads(entry.path.read_bytes())
    assert plist == {"Label": APP_ID, "ProgramArguments": SPACED, "RunAtLoad": True,
                     "ProcessType": "Interactive"}
    set_start_at_login(False, system="darwin", command=SPACED, home=tmp_path)
    assert not entry.path.exists()


def test_windows_run_value_is_one_quoted_command_line(tmp_path: Path) -> None:
    entry = login_entry("win32", [r"C:\Program Files\Ember\ember.exe", "gui", "--tray"],
                        tmp_path)
    assert entry.path is None and entry.value_name == "Ember"
    assert entry.content == r'"C:\Program Files\Ember\ember.exe" gui --tray'
    assert "winreg" not in vars(autostart)  # imported only when the Run key is written


def test_an_unknown_platform_has_no_entry(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="freebsd"):
        login_entry("freebsd14", SPACED, tmp_path)
