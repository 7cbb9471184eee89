"""The Ember server an agent talks to (`ember launch`): the one already answering on the port,
or `ember serve` started as a child process for as long as the agent runs."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from app import resources
from app.agents import KEY_VAR
from backends.errors import EmberError

log = logging.getLogger(__name__)
START_TIMEOUT_S = 120.0  # imports and hardware detection on a busy 2-core machine: ~20 s


def base_url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def running_ember(url: str, key: str | None, timeout: float = 3.0) -> str | None:
    """The version of the Ember server answering at `url`, or None when nothing listens
    there. Something else on the port, or an Ember server that refuses `key`, is an
    EmberError saying what to do."""
    try:
        health = httpx.get(f"{url}/health", timeout=timeout)
    except httpx.TransportError:
        return None
    try:
        body = health.json()
    except ValueError:
        body = None
    if health.status_code != 200 or not isinstance(body, dict) or body.get("status") != "ok" \
            or "version" not in body:
        raise EmberError(f"something that is not Ember answers on {url} (GET /health: "
                         f"{health.status_code}); pick another port with --port")
    # /health is open to all: whether the key is right shows on a route that checks it
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    models = httpx.get(f"{url}/v1/models", headers=headers, timeout=timeout)
    if models.status_code == 401:
        raise EmberError(f"the Ember server on {url} wants an API key"
                         + (" and refuses this one" if key else "")
                         + f": pass --api-key KEY or set {KEY_VAR}")
    return str(body["version"])


def serve_command(port: int) -> list[str]:
    """`ember serve --port PORT` as this Ember runs it (a bundle is its own executable)."""
    if resources.frozen():
        return [sys.executable, "serve", "--port", str(port)]
    return [sys.executable, "-m", "app.cli", "serve", "--port", str(port)]


@dataclass
class ChildServer:
    process: subprocess.Popen
    log_file: Path

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()  # uvicorn ends its requests and the model workers
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("ember serve (pid %d) did not stop in %g s: killing it",
                        self.process.pid, timeout)
            self.process.kill()
            self.process.wait()


def start_server(port: int, key: str | None, log_file: Path,
                 timeout: float = START_TIMEOUT_S) -> ChildServer:
    """Start `ember serve` on `port` and wait until it answers /health. Its output goes to
    `log_file`; a server that exits or does not answer in `timeout` is an EmberError naming
    that file (and the server is stopped)."""
    env = {k: v for k, v in os.environ.items() if k != KEY_VAR}
    if key:
        env[KEY_VAR] = key  # not on the command line, where `ps` would show it
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        # a session of its own: the Ctrl-C the user gives the agent must not reach it
        process = subprocess.Popen(serve_command(port), stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = ChildServer(process, log_file)
    try:
        _wait_healthy(server, port, timeout)
    except BaseException:  # Ctrl-C while it starts, too: no server is left behind
        server.stop()
        raise
    log.info("started ember serve (pid %d) on %s", process.pid, base_url(port))
    return server


def _wait_healthy(server: ChildServer, port: int, timeout: float) -> None:
    url = base_url(port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise EmberError(f"`ember serve --port {port}` exited ({server.process.returncode})"
                             f" before answering; its output: {server.log_file}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise EmberError(f"`ember serve --port {port}` did not answer {url}/health in "
                     f"{timeout:g} s; its output: {server.log_file}")
