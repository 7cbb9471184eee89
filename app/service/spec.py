"""What the service is, once for every platform: the command, its environment, its working
folder and its logs. app.service.units writes it out as a systemd unit, a launchd agent or a
Windows task; the supervisor (app.service.supervisor) runs the same command.

The service's settings come from config.toml's `[service]` table (host, port, idle_ttl_s,
parallel, queue_limit, backend), read by `ember serve --service` when it starts, so a changed
setting needs a restart, not a reinstall; defaults are `ember serve`'s (app.server.settings).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from app.config import Paths, load_config
from app.errors import ConfigError
from app.identity import APP_ID, APP_NAME
from app.runtime.backend_table import NAMES as BACKENDS
from app.server.settings import ServerSettings

SECTION = "service"
UNIT_NAME = "ember.service"  # systemd's name for it
TASK_NAME = APP_NAME  # the Windows logon task's


@dataclass(frozen=True)
class ServiceConfig:
    """config.toml's [service]: what `ember serve --service` listens with."""
    host: str = ServerSettings.host
    port: int = ServerSettings.port
    idle_ttl_s: float = ServerSettings.idle_ttl_s
    parallel: int = ServerSettings.parallel
    queue_limit: int = ServerSettings.queue_limit
    backend: str | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"


def load_service_config(paths: Paths) -> ServiceConfig:
    raw = load_config(paths).get(SECTION, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"[{SECTION}] in config.toml must be a table")
    values: dict[str, object] = {}
    for f in fields(ServiceConfig):
        if f.name not in raw:
            continue
        value, default = raw[f.name], getattr(ServiceConfig, f.name, None)
        expected = type(default) if default is not None else str
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or isinstance(value, bool):
            raise ConfigError(f"config.toml [{SECTION}] {f.name} = {value!r}: expected "
                              f"{expected.__name__}")
        values[f.name] = value
    config = ServiceConfig(**values)  # type: ignore[arg-type]
    if not 1 <= config.port <= 65535:
        raise ConfigError(f"config.toml [{SECTION}] port = {config.port}: expected 1-65535")
    if config.backend is not None and config.backend not in BACKENDS:
        raise ConfigError(f"config.toml [{SECTION}] backend = {config.backend!r}: expected one "
                          f"of {', '.join(BACKENDS)}")
    return config


@dataclass(frozen=True)
class ServiceSpec:
    label: str  # launchd's Label, the plist's file name
    description: str
    command: tuple[str, ...]  # argv of `ember serve --service`
    env: tuple[tuple[str, str], ...]
    working_dir: Path
    log_file: Path  # stdout and stderr, where the platform does not keep them (launchd)


def ember_command(*args: str) -> tuple[str, ...]:
    """argv that runs `ember ARGS` with this Ember: a frozen bundle is its own executable;
    otherwise this interpreter runs the package (no reliance on `ember` being on PATH)."""
    if getattr(sys, "frozen", False):
        return (sys.executable, *args)
    return (sys.executable, "-m", "app", *args)


def service_spec(paths: Paths) -> ServiceSpec:
    env = [("PYTHONUNBUFFERED", "1")]
    if os.environ.get("EMBER_HOME"):  # the service uses the data folder this Ember uses
        env.append(("EMBER_HOME", str(paths.home)))
    if not getattr(sys, "frozen", False):
        # `python -m app` from a checkout finds the package from its folder
        env.append(("PYTHONPATH", str(Path(__file__).resolve().parents[2])))
    return ServiceSpec(label=APP_ID, description=f"{APP_NAME} local LLM server (ember serve)",
                       command=ember_command("serve", "--service"), env=tuple(env),
                       working_dir=paths.home, log_file=paths.logs / "service.log")


def packaged_spec(executable: str = "/usr/bin/ember") -> ServiceSpec:
    """The service as a system package ships it (/usr/lib/systemd/user/ember.service, not
    enabled): the packaged `ember`, the user's default data folder, their home as its folder."""
    return ServiceSpec(label=APP_ID, description=f"{APP_NAME} local LLM server (ember serve)",
                       command=(executable, "serve", "--service"),
                       env=(("PYTHONUNBUFFERED", "1"),),
                       working_dir=Path("~"),  # systemd's name for the user's home
                       log_file=Path("~/.local/share/ember/logs/service.log"))
