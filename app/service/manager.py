"""`ember service`'s verbs on this platform: install/uninstall the per-user service file
(keeping a hash of what Ember wrote, so a hand-edited file is not overwritten or removed
without --force), and start/stop/status through the platform's manager, or through Ember's
own supervisor where that manager cannot run (`mode`)."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from app.config import Paths
from app.errors import ConfigError
from app.service import supervisor
from app.service.endpoint import (
    Endpoint,
    ensure_service_key,
    pid_alive,
    read_endpoint,
    service_dir,
    service_key,
    write_private,
)
from app.service.spec import (
    TASK_NAME,
    UNIT_NAME,
    ServiceConfig,
    ServiceSpec,
    ember_command,
    load_service_config,
    service_spec,
)
from app.service.units import launchd_plist, systemd_unit, unit_path, windows_task_xml
from backends.errors import EmberError

Mode = Literal["systemd", "launchd", "schtasks", "supervised"]
MODE_ENV = "EMBER_SERVICE_MODE"
START_WAIT_S = 60.0  # `ember serve` listens in seconds; a slow disk's first import is longer


class ServiceError(EmberError):
    """One line a user can act on."""


@dataclass(frozen=True)
class ServiceFile:
    path: Path
    content: bytes


def platform() -> str:
    return "linux" if sys.platform.startswith("linux") else sys.platform


def service_file(paths: Paths, spec: ServiceSpec | None = None,
                 home: Path | None = None) -> ServiceFile:
    """The file this platform's manager reads, and what Ember writes in it."""
    spec = spec or service_spec(paths)
    home = home or Path.home()
    plat = platform()
    if plat == "linux":
        content = systemd_unit(spec).encode()
    elif plat == "darwin":
        content = launchd_plist(spec)
    else:
        content = windows_task_xml(spec, getpass.getuser()).encode("utf-16")
    path = unit_path(plat, home, spec.label) or service_dir(paths) / "ember-task.xml"
    return ServiceFile(path=path, content=content)


def _record(paths: Paths) -> Path:
    return service_dir(paths) / "installed.json"


def _written_hash(paths: Paths) -> str | None:
    try:
        return str(json.loads(_record(paths).read_text(encoding="utf-8"))["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _edited(paths: Paths, path: Path) -> bool:
    """The file differs from what Ember wrote there (or Ember did not write it)."""
    written = _written_hash(paths)
    return written is None or hashlib.sha256(path.read_bytes()).hexdigest() != written


def mode() -> Mode:
    """How the service runs here: the platform's manager, or Ember's supervisor where the
    manager does not answer (no systemd user manager in a container or an ssh session).
    EMBER_SERVICE_MODE=supervised chooses the supervisor where the manager would answer."""
    forced = os.environ.get(MODE_ENV, "")
    if forced:
        if forced not in get_args(Mode):
            raise ConfigError(f"{MODE_ENV}={forced!r}: expected one of {', '.join(get_args(Mode))}")
        return forced  # type: ignore[return-value]
    plat = platform()
    if plat == "linux":
        return "systemd" if _systemctl_works() else "supervised"
    if plat == "darwin":
        return "launchd"
    return "schtasks" if shutil.which("schtasks") else "supervised"


def _systemctl_works() -> bool:
    if shutil.which("systemctl") is None:
        return False
    try:
        return subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True,
                              timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _run(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()
        raise ServiceError(f"{' '.join(argv[:3])} failed: {last[-1] if last else done.returncode}")


def install(paths: Paths, force: bool = False, home: Path | None = None) -> str:
    """Write the service file, make the key, register it to start at login. Returns what
    happened, in a line."""
    target = service_file(paths, home=home)
    if target.path.exists() and not force:
        if _edited(paths, target.path):
            raise ServiceError(f"{target.path} was edited since Ember wrote it (or not written "
                               "by Ember); `ember service install --force` replaces it")
        raise ServiceError(f"the service is installed already ({target.path}); "
                           "`ember service install --force` writes it again")
    ensure_service_key(paths)
    load_service_config(paths)  # a broken [service] table is said now, not at login
    target.path.parent.mkdir(parents=True, exist_ok=True)
    target.path.write_bytes(target.content)
    write_private(_record(paths), json.dumps(
        {"path": str(target.path), "sha256": hashlib.sha256(target.content).hexdigest()}) + "\n")
    how = mode()
    if how == "systemd":
        _run("systemctl", "--user", "daemon-reload")
        _run("systemctl", "--user", "enable", UNIT_NAME)
        return f"installed {target.path}: starts at login (`ember service start` starts it now)"
    if how == "launchd":
        return f"installed {target.path}: starts at login (`ember service start` starts it now)"
    if how == "schtasks":
        _run("schtasks", "/Create", "/F", "/TN", TASK_NAME, "/XML", str(target.path))
        return f"installed the logon task {TASK_NAME} (`ember service start` starts it now)"
    return (f"installed {target.path}; no systemd user manager answers here, so "
            "`ember service start` runs Ember's own supervisor instead")


def uninstall(paths: Paths, force: bool = False, home: Path | None = None) -> str:
    target = service_file(paths, home=home)
    if not target.path.exists():
        raise ServiceError("the service is not installed")
    if _edited(paths, target.path) and not force:
        raise ServiceError(f"{target.path} was edited since Ember wrote it; "
                           "`ember service uninstall --force` removes it anyway")
    stop(paths)
    how = mode()
    if how == "systemd":
        _run("systemctl", "--user", "disable", UNIT_NAME)
    elif how == "schtasks":
        _run("schtasks", "/Delete", "/F", "/TN", TASK_NAME)
    target.path.unlink()
    _record(paths).unlink(missing_ok=True)
    if how == "systemd":
        _run("systemctl", "--user", "daemon-reload")
    return f"removed {target.path}"


def port_holder(host: str, port: int) -> str | None:
    """None when `host:port` is free; else who holds it, as well as psutil can tell.

    Free means free for the server, which binds as asyncio does (SO_REUSEADDR on POSIX): a
    port whose last connections wait out TIME_WAIT, as every port a client (the window) was
    connected to does for a minute after `ember service stop`, is free to listen on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if os.name != "nt":  # on Windows the option would let a second listener in
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return None
        except OSError:
            pass
    try:
        import psutil

        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN \
                    and conn.pid:
                proc = psutil.Process(conn.pid)
                return f"{proc.name()} (pid {conn.pid})"
    except (psutil.Error, OSError):
        pass
    return "another process"


def start(paths: Paths, wait_s: float = START_WAIT_S) -> Endpoint:
    running = read_endpoint(paths)
    if running is not None:
        raise ServiceError(f"the service runs already on {running.url} (pid {running.pid})")
    config = load_service_config(paths)
    holder = port_holder(config.host, config.port)
    if holder is not None:
        raise ServiceError(f"port {config.port} is in use by {holder}; stop it, or set another "
                           "port in config.toml's [service] table (port = ...)")
    ensure_service_key(paths)
    how = mode()
    if how == "systemd":
        _run("systemctl", "--user", "start", UNIT_NAME)
    elif how == "launchd":
        target = service_file(paths)
        if not target.path.exists():
            raise ServiceError("install the service first: `ember service install`")
        _run("launchctl", "load", "-w", str(target.path))
    elif how == "schtasks":
        _run("schtasks", "/Run", "/TN", TASK_NAME)
    else:
        if supervisor.supervisor_pid(paths) is not None:
            raise ServiceError("the supervisor runs already; `ember service stop` first")
        spec = service_spec(paths)
        pid = supervisor.start_detached(ember_command("service", "run"), spec.log_file)
        return wait_listening(paths, config, wait_s, supervisor_pid=pid)
    return wait_listening(paths, config, wait_s)


def wait_listening(paths: Paths, config: ServiceConfig, wait_s: float,
                   supervisor_pid: int | None = None) -> Endpoint:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        endpoint = read_endpoint(paths)
        if endpoint is not None:
            return endpoint
        if supervisor_pid is not None and not pid_alive(supervisor_pid):
            raise ServiceError("Ember's supervisor stopped before the server listened; "
                               "see `ember service logs`")
        time.sleep(0.1)
    raise ServiceError(f"the service did not listen on port {config.port} within {wait_s:g} s; "
                       "see `ember service logs`")


def stop(paths: Paths) -> bool:
    """Stop the service, however it runs; False when it was not running."""
    how = mode()
    if how == "supervised" or supervisor.supervisor_pid(paths) is not None:
        return supervisor.stop(paths)
    was = read_endpoint(paths) is not None
    if how == "systemd":
        _run("systemctl", "--user", "stop", UNIT_NAME)
    elif how == "launchd":
        target = service_file(paths)
        if target.path.exists():
            subprocess.run(["launchctl", "unload", str(target.path)], capture_output=True)
    elif how == "schtasks":
        subprocess.run(["schtasks", "/End", "/TN", TASK_NAME], capture_output=True)
    return was


@dataclass(frozen=True)
class Status:
    mode: Mode
    installed: bool
    endpoint: Endpoint | None
    models: list[dict]  # Ollama's /api/ps entries: name, size (bytes), size_vram, ...
    error: str | None = None  # the server did not answer (or refused the key)


def status(paths: Paths) -> Status:
    how = mode()
    installed = service_file(paths).path.exists()
    endpoint = read_endpoint(paths)
    if endpoint is None:
        return Status(how, installed, None, [])
    import httpx

    key = service_key(paths)
    try:
        r = httpx.get(f"{endpoint.url}/api/ps", timeout=5,
                      headers={"Authorization": f"Bearer {key}"} if key else {})
        r.raise_for_status()
        return Status(how, installed, endpoint, list(r.json().get("models", [])))
    except (httpx.HTTPError, ValueError) as e:
        return Status(how, installed, endpoint, [], error=str(e) or type(e).__name__)


def log_command(paths: Paths, lines: int, follow: bool) -> list[str]:
    """What shows the service's output here: the journal under systemd, else its log file."""
    if mode() == "systemd":
        return ["journalctl", "--user", "-u", UNIT_NAME, "-n", str(lines),
                *(["-f"] if follow else []), "--no-pager"]
    log_file = service_spec(paths).log_file
    if not log_file.exists():
        raise ConfigError(f"no service log yet ({log_file})")
    return ["tail", "-n", str(lines), *(["-f"] if follow else []), str(log_file)]
