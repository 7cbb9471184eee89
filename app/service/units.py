"""The service description (app.service.spec) written out for each platform's per-user
service manager: a systemd user unit, a launchd agent plist, a Windows Task Scheduler task
(logon trigger). Pure functions of the spec, so every platform's file is tested everywhere."""

from __future__ import annotations

import plistlib
from pathlib import Path
from xml.sax.saxutils import escape

from app.service.spec import UNIT_NAME, ServiceSpec

RESTART_DELAY_S = 3


def _systemd_quote(word: str) -> str:
    # systemd expands %-specifiers everywhere and splits ExecStart at unquoted spaces
    word = word.replace("%", "%%")
    if word and not any(c in word for c in " \t\"'\\"):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_unit(spec: ServiceSpec) -> str:
    """A user unit (~/.config/systemd/user/ember.service): restarted when it fails, its output
    in the journal (`journalctl --user -u ember`), Ember's own log in the data folder."""
    env = "".join(f"Environment={_systemd_quote(f'{k}={v}')}\n" for k, v in spec.env)
    return (
        "[Unit]\n"
        f"Description={spec.description}\n"
        "After=network.target\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={' '.join(_systemd_quote(a) for a in spec.command)}\n"
        f"{env}"
        # a path setting, not a command line: taken whole, unquoted (only % is special)
        f"WorkingDirectory={str(spec.working_dir).replace('%', '%%')}\n"
        "Restart=on-failure\n"
        f"RestartSec={RESTART_DELAY_S}\n"
        "StandardOutput=journal\n"
        "StandardError=journal\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n")


def launchd_plist(spec: ServiceSpec) -> bytes:
    """A launch agent (~/Library/LaunchAgents/<label>.plist): started at login, kept alive."""
    return plistlib.dumps({
        "Label": spec.label,
        "ProgramArguments": list(spec.command),
        "EnvironmentVariables": dict(spec.env),
        "WorkingDirectory": str(spec.working_dir),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},  # restarted unless it stopped cleanly
        "ThrottleInterval": RESTART_DELAY_S * 3,
        "StandardOutPath": str(spec.log_file),
        "StandardErrorPath": str(spec.log_file),
        "ProcessType": "Background",
    })


def windows_task_xml(spec: ServiceSpec, user: str) -> str:
    """A Task Scheduler task run at `user`'s logon, restarted when it fails (`schtasks /Create
    /XML`). A task has no environment of its own: the command is wrapped so it sets it."""
    program, *args = spec.command
    if spec.env:
        sets = " && ".join(f'set "{k}={v}"' for k, v in spec.env)
        line = " ".join(_windows_quote(a) for a in spec.command)
        program, args = "cmd.exe", ["/d", "/c", f"{sets} && {line}"]
    return (
        '<?xml version="1.0" encoding="UTF-16"?>\n'
        '<Task version="1.2" xmlns="http://schemas.microsoft.com/windows/2004/02/mit/task">\n'
        f"  <RegistrationInfo><Description>{escape(spec.description)}</Description>"
        "</RegistrationInfo>\n"
        "  <Triggers>\n"
        f"    <LogonTrigger><Enabled>true</Enabled><UserId>{escape(user)}</UserId>"
        "</LogonTrigger>\n"
        "  </Triggers>\n"
        "  <Principals>\n"
        f'    <Principal id="Author"><UserId>{escape(user)}</UserId>'
        "<LogonType>InteractiveToken</LogonType><RunLevel>LeastPrivilege</RunLevel>"
        "</Principal>\n"
        "  </Principals>\n"
        "  <Settings>\n"
        "    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>\n"
        "    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>\n"
        "    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>\n"
        "    <ExecutionTimeLimit>PT0S</ExecutionTimeLimit>\n"
        "    <RestartOnFailure><Interval>PT1M</Interval><Count>999</Count></RestartOnFailure>\n"
        "    <Hidden>true</Hidden>\n"
        "  </Settings>\n"
        '  <Actions Context="Author">\n'
        "    <Exec>\n"
        f"      <Command>{escape(program)}</Command>\n"
        f"      <Arguments>{escape(' '.join(_windows_quote(a) for a in args))}</Arguments>\n"
        f"      <WorkingDirectory>{escape(str(spec.working_dir))}</WorkingDirectory>\n"
        "    </Exec>\n"
        "  </Actions>\n"
        "</Task>\n")


def _windows_quote(word: str) -> str:
    return f'"{word}"' if (" " in word or not word) and not word.startswith('"') else word


def unit_path(platform: str, home: Path, label: str) -> Path | None:
    """Where the platform's per-user service file lives (None: Windows keeps its tasks in
    the Task Scheduler; Ember keeps the XML it registered in the data folder)."""
    if platform == "linux":
        return home / ".config" / "systemd" / "user" / UNIT_NAME
    if platform == "darwin":
        return home / "Library" / "LaunchAgents" / f"{label}.plist"
    return None
