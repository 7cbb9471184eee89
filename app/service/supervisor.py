"""Ember's own supervisor, where no service manager can run (a container, a session without a
systemd user manager): `ember service run` keeps `ember serve --service` up, restarting it
when it dies (1 s, doubling to 30 s; back to 1 s once a run lasted a minute), until SIGTERM.
`start` runs it detached, its pid in `<data>/service/supervisor.pid`; `stop` ends it."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from app.config import Paths
from app.service.endpoint import pid_alive, service_dir, write_private

log = logging.getLogger(__name__)

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
STEADY_S = 60.0  # a run this long was not a crash loop: the delay starts over
STOP_GRACE_S = 10.0


def pid_file(paths: Paths) -> Path:
    return service_dir(paths) / "supervisor.pid"


def supervisor_pid(paths: Paths) -> int | None:
    """The running supervisor's pid, or None (no file, or a stale one)."""
    try:
        pid = int(pid_file(paths).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def run(paths: Paths, command: Sequence[str], log_file: Path) -> int:
    """Supervise `command` in this process until SIGTERM/SIGINT; returns the exit code."""
    stopping = threading.Event()
    child: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, _frame: object) -> None:
        stopping.set()
        if child and child[0].poll() is None:
            child[0].terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    write_private(pid_file(paths), f"{os.getpid()}\n")
    log.info("supervising %s", " ".join(command[-2:]))
    delay = FIRST_DELAY_S
    try:
        while not stopping.is_set():
            started = time.monotonic()
            with open(log_file, "ab") as out:
                child[:] = [subprocess.Popen(list(command), stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=out)]
            code = child[0].wait()
            if stopping.is_set():
                break
            if time.monotonic() - started >= STEADY_S:
                delay = FIRST_DELAY_S
            log.warning("ember serve (pid %d) ended with %d; restarting in %g s",
                        child[0].pid, code, delay)
            stopping.wait(delay)
            delay = min(delay * 2, MAX_DELAY_S)
        if child and child[0].poll() is None:
            try:
                child[0].wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                child[0].kill()
                child[0].wait()
    finally:
        if supervisor_pid(paths) in (os.getpid(), None):
            pid_file(paths).unlink(missing_ok=True)
    log.info("supervisor stopped")
    return 0


def start_detached(command: Sequence[str], log_file: Path) -> int:
    """Start `command` (the supervisor) in a session of its own, so it outlives this terminal;
    returns its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        kwargs: dict[str, object] = {}
        if os.name == "nt":
            kwargs["creationflags"] = (subprocess.DETACHED_PROCESS  # type: ignore[attr-defined]
                                       | subprocess.CREATE_NEW_PROCESS_GROUP)  # type: ignore[attr-defined]
        else:
            kwargs["start_new_session"] = True
        proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                close_fds=True, **kwargs)  # type: ignore[call-overload]
    return proc.pid


def stop(paths: Paths, timeout_s: float = STOP_GRACE_S + 5) -> bool:
    """End the supervisor and its server; False when none was running."""
    pid = supervisor_pid(paths)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        _kill_hard(pid)
    return True


def _kill_hard(pid: int) -> None:
    """The supervisor did not stop in time: end it and, where it leads its process group
    (start_detached's new session), its server with it, which would outlive it otherwise."""
    if os.name == "nt":
        os.kill(pid, signal.SIGTERM)  # TerminateProcess
        return
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


