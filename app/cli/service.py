"""`ember service`: Ember's server as a per-user background service (app.service)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import click

from app.cli import cli
from app.config import paths

if TYPE_CHECKING:
    from app.service.manager import Status


@cli.group()
def service() -> None:
    """Run `ember serve` in the background, at login (a systemd user unit, a launchd agent
    or a logon task; Ember's own supervisor where none of them can run).

    Its settings: config.toml's [service] table (host, port, idle_ttl_s, parallel,
    queue_limit, backend); its API key: DATA/service/api-key."""


@service.command()
@click.option("--force", is_flag=True, help="write the service file even if it exists or "
                                            "was edited by hand")
def install(force: bool) -> None:
    """Install the service (started at login) and make its API key."""
    from app.service import manager

    click.echo(manager.install(paths(), force=force))


@service.command()
@click.option("--force", is_flag=True, help="remove the service file even if it was edited")
def uninstall(force: bool) -> None:
    """Stop the service and remove its file (the key and the data stay)."""
    from app.service import manager

    click.echo(manager.uninstall(paths(), force=force))


@service.command()
def start() -> None:
    """Start the service now, and wait until it listens."""
    from app.service import manager

    endpoint = manager.start(paths())
    click.echo(f"the service listens on {endpoint.url} ({manager.mode()}, pid {endpoint.pid})")


@service.command()
def stop() -> None:
    """Stop the service."""
    from app.service import manager

    click.echo("stopped" if manager.stop(paths()) else "the service was not running")


@service.command()
def status() -> None:
    """Whether the service runs, how, where, for how long, and its loaded models."""
    from app.service import manager

    for line in status_lines(manager.status(paths()), time.time()):
        click.echo(line)


def status_lines(s: Status, now: float) -> list[str]:
    installed = "installed" if s.installed else "not installed"
    if s.endpoint is None:
        return [f"not running ({installed}; {s.mode})"]
    lines = [f"running on {s.endpoint.url}, pid {s.endpoint.pid}, "
             f"up {_duration(now - s.endpoint.started_at)} ({s.mode}; {installed})"]
    if s.error:
        return [*lines, f"  it did not answer: {s.error}"]
    if not s.models:
        return [*lines, "  no model loaded"]
    for m in s.models:
        gpu = f", {m['size_vram'] / 2**30:.2f} GiB of it on the GPU" if m.get("size_vram") else ""
        lines.append(f"  {m.get('name')}: {m.get('size', 0) / 2**30:.2f} GiB{gpu} "
                     f"({m.get('backend', '?')}, context {m.get('context_length', '?')})")
    return lines


@service.command()
@click.option("-n", "--lines", default=50, show_default=True, type=int)
@click.option("-f", "--follow", is_flag=True, help="keep printing new lines")
def logs(lines: int, follow: bool) -> None:
    """The service's output (the journal under systemd, else DATA/logs/service.log);
    Ember's own log is DATA/logs/ember.log."""
    from app.service import manager

    argv = manager.log_command(paths(), lines, follow)
    if shutil.which(argv[0]) is None:  # no tail (Windows): print the file's end
        with open(argv[-1], encoding="utf-8", errors="replace") as f:
            click.echo("".join(f.readlines()[-lines:]), nl=False)
        return
    sys.exit(subprocess.call(argv))


@service.command(hidden=True)
def run() -> None:
    """The supervisor `ember service start` runs where no service manager can."""
    from app import logs as ember_logs
    from app.service import supervisor
    from app.service.spec import service_spec

    ember_logs.setup()
    spec = service_spec(paths())
    sys.exit(supervisor.run(paths(), spec.command, spec.log_file))


def _duration(seconds: float) -> str:
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"
