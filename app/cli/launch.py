"""`ember launch AGENT`: a coding agent (Claude Code, Codex, opencode, aider) started against
Ember, with the variables, arguments and config files it needs (app.agents), on a model checked
first, and the server started for it when none runs on the port (app.agent_server)."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys

import click

from app.agents import AGENTS, KEY_VAR, AgentSetup, agent_setup
from app.cli import cli
from app.config import DEFAULT_MODEL, paths
from app.store import Store
from backends.errors import EmberError

log = logging.getLogger(__name__)
DEFAULT_PORT = 11435  # `ember serve`'s


def shown(setup: AgentSetup, executable: str, extra: tuple[str, ...], key: str | None) -> str:
    """The environment and command line as a shell would take them, the key masked."""
    lines = []
    for path, text in setup.files.items():
        lines.append(f"# {path}:")
        lines.extend(f"#   {line}" for line in text.rstrip("\n").splitlines())
    for name, value in setup.env.items():
        value = "****" if key and name in setup.secret_env else value
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append(shlex.join([executable, *setup.args, *extra]))
    return "\n".join(lines)


def run_agent(executable: str, args: list[str], env: dict[str, str]) -> int:
    """Run the agent in the foreground until it exits; its exit status (128 + N when a signal
    N ended it). Ctrl-C is the agent's (Claude Code and Codex interrupt an answer with it):
    Ember ignores it meanwhile instead of ending the agent. A SIGTERM or SIGHUP (the terminal
    closed) is passed on to the agent, so that Ember lives on to stop the server it started."""
    process = subprocess.Popen([executable, *args], env=env)

    def forward(signum: int, frame: object) -> None:
        process.send_signal(signum)

    handled = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP")
                                                 else [])
    previous = {s: signal.getsignal(s) for s in handled}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for s in handled[1:]:
        signal.signal(s, forward)
    try:
        code = process.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - code if code < 0 else code


@cli.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("agent", type=click.Choice(list(AGENTS)))
@click.argument("agent_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- AGENT_ARGS...]")
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="an installed model that can call tools")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int,
              help="the Ember server's port: used if one answers there, else started there")
@click.option("--api-key", default=None, envvar=KEY_VAR,
              help="the server's API key, if it wants one (also a server started here)")
@click.option("--print-env", "--dry-run", "print_env", is_flag=True,
              help="print the variables, files and command line instead of running the agent")
def launch(agent: str, agent_args: tuple[str, ...], model: str, port: int,
           api_key: str | None, print_env: bool) -> None:
    """Start a coding agent on an Ember model: claude (Claude Code), codex, opencode or aider.

    The agent gets the variables and config it needs (nothing in its own config changes), and
    `ember serve` is started for it when no Ember server answers on --port. Arguments after
    `--` go to the agent: `ember launch claude -- -p "explain this repo"`.
    """
    from app.agent_model import check_model
    from app.agent_server import base_url, running_ember, serve_command, start_server

    spec = AGENTS[agent]
    executable = shutil.which(spec.executable)
    if executable is None and not print_env:
        raise EmberError(f"{spec.title} is not installed ({spec.executable} is not on PATH); "
                         f"install it with: {spec.install}")
    checked = check_model(Store(), model, spec)
    for warning in checked.warnings:
        click.echo(warning, err=True)
    url = base_url(port)
    folder = paths().home / "agents"
    setup = agent_setup(agent, url, model, checked.context, api_key, folder)
    version = running_ember(url, api_key)
    if print_env:
        server = (f"Ember {version} answers on {url}" if version else
                  f"nothing answers on {url}: `{shlex.join(serve_command(port))}` would start")
        click.echo(f"# {spec.title} on {model} ({checked.context:,}-token context); {server}")
        if executable is None:
            click.echo(f"# {spec.executable} is not on PATH: {spec.install}")
        click.echo(shown(setup, spec.executable, agent_args, api_key))
        return
    assert executable is not None
    for path, text in setup.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    child = None
    if version is None:
        log_file = paths().logs / "launch-serve.log"
        click.echo(f"starting `ember serve` on {url} (its output: {log_file})", err=True)
        child = start_server(port, api_key, log_file)
    log.info("launching %s on %s at %s", agent, model, url)
    try:
        code = run_agent(executable, [*setup.args, *agent_args],
                         {**os.environ, **setup.env})
    finally:
        if child is not None:
            child.stop()
    sys.exit(code)
