"""`ember service` on this machine, in the mode it runs here: no systemd user manager answers
in the test container (`systemctl --user` finds no bus), so start/stop run Ember's own
supervisor. The real CLI, the real `ember serve --service`, no model (its routes answer
without one): it starts, answers with the service's key, comes back after its server is
killed, and stops."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from app.config import Paths
from app.server.settings import ServerSettings
from app.service.endpoint import pid_alive, read_endpoint, service_key
from app.service.manager import ServiceError, start
from app.service.supervisor import supervisor_pid
from tests.support.live_server import free_port


def ember(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=env, timeout=90)


def wait_for_new_server(paths: Paths, old_pid: int, timeout_s: float = 30) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        endpoint = read_endpoint(paths)
        if endpoint is not None and endpoint.pid != old_pid:
            return endpoint.pid
        time.sleep(0.1)
    raise AssertionError(f"no new server within {timeout_s} s")


def test_supervised_service_starts_answers_survives_a_killed_server_and_stops(tmp_path: Path):
    paths = Paths(tmp_path / "home")
    port = free_port()
    paths.home.mkdir()
    paths.config_file.write_text(f"[service]\nport = {port}\n")
    env = {**os.environ, "EMBER_HOME": str(paths.home), "HOME": str(tmp_path / "user"),
           "EMBER_SERVICE_MODE": "supervised"}
    url = f"http://127.0.0.1:{port}"

    started = ember(env, "service", "start")
    assert started.returncode == 0, started.stderr
    assert f"listens on {url} (supervised" in started.stdout
    try:
        key = service_key(paths)
        assert key is not None
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{url}/v1/models", headers=auth, timeout=10).status_code == 200
        assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401  # the key is asked
        status = ember(env, "service", "status")
        assert f"running on {url}" in status.stdout and "(supervised;" in status.stdout
        assert "no model loaded" in status.stdout

        first = read_endpoint(paths)
        assert first is not None
        supervisor = supervisor_pid(paths)
        assert supervisor is not None and psutil.Process(first.pid).ppid() == supervisor
        os.kill(first.pid, signal.SIGKILL)
        second = wait_for_new_server(paths, first.pid)
        assert httpx.get(f"{url}/v1/models", headers=auth, timeout=10).status_code == 200
        assert psutil.Process(second).ppid() == supervisor

        logs = ember(env, "service", "logs", "-n", "50")
        assert f"Ember API on {url}" in logs.stdout  # the servers' own output, both runs
        with pytest.raises(ServiceError, match=rf"runs already on {url} \(pid {second}\)"):
            start(paths)  # found running before any mode is asked
    finally:
        stopped = ember(env, "service", "stop")
    assert stopped.stdout.strip() == "stopped", stopped.stderr
    # gone, or a zombie that this container's init has not reaped yet
    assert not pid_alive(second) and not pid_alive(supervisor)
    assert not (paths.home / "service" / "endpoint.json").exists()  # removed by a clean stop
    assert read_endpoint(paths) is None and supervisor_pid(paths) is None
    log = (paths.logs / "ember.log").read_text()
    assert f"ember serve (pid {first.pid}) ended with -9; restarting" in log


def test_status_lists_the_loaded_model_with_its_memory_asking_with_the_key(
        runtime, qwen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`ember service status` against a server that holds a model (the session's runtime,
    loaded once for the tier): its name, memory and backend, asked with the service's key."""
    from app.cli.service import status_lines
    from app.service.endpoint import ensure_service_key, write_endpoint
    from app.service.manager import status
    from tests.support.live_server import serve_app

    monkeypatch.setenv("EMBER_SERVICE_MODE", "supervised")
    paths = Paths(tmp_path / "home")
    key = ensure_service_key(paths)
    with serve_app(runtime, ServerSettings(api_key=key, owns_runtime=False)) as url:
        write_endpoint(paths, url, started_at=time.time() - 125)
        s = status(paths)
    assert s.error is None and [m["name"] for m in s.models] == [qwen.ref]
    lines = status_lines(s, time.time())
    assert lines[0].startswith(f"running on {url}, pid {os.getpid()}, up 2 min (supervised;")
    assert re.fullmatch(rf"  {re.escape(qwen.ref)}: \d+\.\d\d GiB.* \(llamacpp, context 4096\)",
                        lines[1]), lines
