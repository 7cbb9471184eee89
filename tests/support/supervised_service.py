"""A real per-user Ember service for end-to-end tests, as `ember service start` runs it where
no systemd user manager answers (the test container): Ember's supervisor keeping
`ember serve --service` up, on the port of the data folder's config.toml, with its key in
`<data>/service/api-key`. And the process facts the tests check against it: which processes
have a model's weights mapped, and what a process wrote in the shared log."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from app.config import Paths
from app.service.endpoint import Endpoint, read_endpoint, service_key
from app.store import InstalledModel
from tests.support import REPO
from tests.support.desktop import home_with_model
from tests.support.models import TEST_HOME

# a model's weights, as llama.cpp maps them (its default, use_mmap): the process that loaded
# a model has its file in /proc/PID/maps. (The llama.cpp libraries are no sign: a process that
# only asks ggml for its devices, as the hardware report does, maps them too.)
WEIGHTS = ".gguf"


@dataclass(frozen=True)
class Service:
    paths: Paths
    env: dict[str, str]  # what `ember service ...` runs with
    url: str
    key: str

    def endpoint(self) -> Endpoint:
        endpoint = read_endpoint(self.paths)
        assert endpoint is not None, f"the service at {self.url} announces no endpoint"
        return endpoint

    def loaded(self) -> list[dict]:
        """/ember/loaded's models (with their workers' pids), asked with the key."""
        r = httpx.get(f"{self.url}/ember/loaded", timeout=10,
                      headers={"Authorization": f"Bearer {self.key}"})
        r.raise_for_status()
        return list(r.json()["models"])

    def wait_for_new_server(self, old_pid: int, timeout_s: float = 60) -> Endpoint:
        """The server the supervisor started after `old_pid`, once it listens."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            endpoint = read_endpoint(self.paths)
            if endpoint is not None and endpoint.pid != old_pid:
                return endpoint
            time.sleep(0.1)
        raise AssertionError(f"no new server after pid {old_pid} within {timeout_s} s; "
                             f"service log (end): {service_log(self.paths)[-3000:]}")


def ember(env: dict[str, str], *args: str,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)


def service_home(home: Path, model: InstalledModel, port: int, config: str = "") -> Paths:
    """A data folder with `model` installed, for a service on `port` (config.toml's
    [service] table, after `config`'s other tables), with the test home's machine measurement
    when there is one (no bandwidth measurement at the start)."""
    home_with_model(home, model)
    if (TEST_HOME / "hardware.json").exists():
        shutil.copy(TEST_HOME / "hardware.json", home / "hardware.json")
    (home / "config.toml").write_text(f"{config}[service]\nport = {port}\nidle_ttl_s = 600.0\n",
                                      encoding="utf-8")
    return Paths(home)


def service_log(paths: Paths) -> str:
    log = paths.logs / "service.log"
    return log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""


@contextmanager
def supervised_service(paths: Paths, port: int, user_home: Path,
                       **extra_env: str) -> Iterator[Service]:
    """`ember service start` on `paths` (config.toml's [service] port must be `port`), and
    `ember service stop` at the end, whatever happened. `user_home`: the service's HOME, so
    that nothing it does reaches the real one; `extra_env`: more of the service's
    environment (EMBER_KV_CACHE_GB, which the test session sets to 0)."""
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    env.update(EMBER_HOME=str(paths.home), HOME=str(user_home), EMBER_SERVICE_MODE="supervised",
               **extra_env)
    user_home.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    started = ember(env, "service", "start")
    try:
        assert started.returncode == 0, started.stdout + started.stderr + service_log(paths)
        assert f"listens on {url} (supervised" in started.stdout, started.stdout
        key = service_key(paths)
        assert key is not None
        yield Service(paths, env, url, key)
    finally:
        stopped = ember(env, "service", "stop")
        assert stopped.returncode == 0, stopped.stderr


def weights_mapped(pid: int) -> list[str]:
    """The model files process `pid` has mapped (none: it runs no model itself)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return sorted({line.split(maxsplit=5)[-1] for line in maps.splitlines()
                   if line.rstrip().endswith(WEIGHTS)})


def holding_weights(pid: int) -> dict[int, list[str]]:
    """Process `pid` and each of its descendants that has a model's weights mapped."""
    pids = [pid]
    with suppress(psutil.Error):
        pids += [p.pid for p in psutil.Process(pid).children(recursive=True)]
    return {p: files for p in pids if (files := weights_mapped(p))}


def logged_by(paths: Paths, pid: int, text: str) -> list[str]:
    """The lines of the data folder's ember.log that process `pid` wrote containing `text`
    (every Ember process writes there: app.logs puts the pid in brackets)."""
    log = paths.logs / "ember.log"
    if not log.exists():
        return []
    return [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
            if f"[{pid}]" in line and text in line]


def wait_gone(pid: int, timeout_s: float = 20) -> bool:
    """Whether `pid` ended (or is a zombie nobody reaped yet) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False
