"""The window joined to a running Ember service, as a user lives it (issue 43): a real
supervised `ember service` (tests/support/supervised_service.py) and a real `ember gui` on a
real X server (Xvfb, Qt's xcb plugin), on the same data folder with the real
Qwen2.5-Coder-0.5B. A question typed on the keyboard (xdotool) and an OpenAI client on the
service's port ask the model at the same time; the service loads it once, in one worker,
and the window loads nothing (no model file mapped in its process or any child of it). Then
the service's server is killed, its supervisor starts another, and the next question typed
in the same chat is answered through it: the window lives on; and again after `ember
service stop` and `ember service start` (on a port the window was connected to). Greedy and
short answers (config.toml), screenshots in build/ci-artifacts/."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import openai

from app.store import InstalledModel
from tests.support import REPO
from tests.support.desktop import (
    MAIN_WINDOW,
    desktop_env,
    find_window,
    screenshot,
    type_text,
    wait_for_answer,
    xvfb,
)
from tests.support.first_run import crash_reports
from tests.support.live_server import free_port
from tests.support.supervised_service import (
    ember,
    holding_weights,
    logged_by,
    service_home,
    service_log,
    supervised_service,
    wait_gone,
)

ARTIFACTS = REPO / "build" / "ci-artifacts"
FIRST = "What is 2+2? Answer with just the number."
SECOND = "What is 3+3? Answer with just the number."
THIRD = "What is 4+4? Answer with just the number."
ANSWER_S = 120  # a cold load and six tokens on two busy cores take well under this


APP_CONFIG = "[app]\nmax_tokens = 6\ntemperature = 0.0\n\n"  # short greedy answers


def test_on_x11_the_window_shares_the_service_worker_and_survives_its_restart(
        qwen: InstalledModel, tmp_path: Path) -> None:
    port = free_port()
    paths = service_home(tmp_path / "home", qwen, port, APP_CONFIG)
    home = paths.home
    weights = os.path.realpath(home / "models" / "ember" / qwen.id / qwen.path.name)
    with supervised_service(paths, port, tmp_path / "user") as service, xvfb() as display:
        first_server = service.endpoint()
        console = (tmp_path / "gui-console.txt").open("w+", encoding="utf-8")
        gui = subprocess.Popen([sys.executable, "-m", "app.cli", "gui"], cwd=REPO,
                               env=desktop_env(display, home, EMBER_CHECK_THREADS="1"),
                               stdout=console, stderr=subprocess.STDOUT, text=True)
        try:
            window, _ = find_window(display, "ember", timeout=120, title=MAIN_WINDOW,
                                    owner=gui)
            assert logged_by(paths, gui.pid, f"joining the Ember service at {service.url}")

            # the window's question and an API client's, on the same unloaded model
            api_answer: list[str] = []
            client = openai.OpenAI(base_url=service.url + "/v1", api_key=service.key,
                                   timeout=ANSWER_S)
            asking = threading.Thread(target=lambda: api_answer.append(
                client.chat.completions.create(
                    model=qwen.ref, messages=[{"role": "user", "content": FIRST}],
                    max_tokens=6, temperature=0).choices[0].message.content or ""))
            type_text(display, window, FIRST)
            asking.start()
            answer = wait_for_answer(home / "history.db", FIRST, timeout=ANSWER_S)
            asking.join(ANSWER_S)
            screenshot(display, ARTIFACTS / "window-service-1-answered.png")
            assert "4" in answer and api_answer and "4" in api_answer[0], (answer, api_answer)

            [model] = service.loaded()  # one worker for both
            assert model["model"] == qwen.ref
            worker = model["pid"]
            assert holding_weights(first_server.pid) == {worker: [weights]}
            assert holding_weights(gui.pid) == {}, "the window loaded a model of its own"
            assert len(logged_by(paths, first_server.pid, f"loaded {qwen.ref} on")) == 1
            assert not logged_by(paths, gui.pid, "worker pid")

            # the service's server dies; its supervisor starts another on the same port
            os.kill(first_server.pid, signal.SIGKILL)
            second_server = service.wait_for_new_server(first_server.pid)
            assert wait_gone(worker), f"worker {worker} outlived its killed server"
            assert service.loaded() == []

            type_text(display, window, SECOND)
            again = wait_for_answer(home / "history.db", SECOND, timeout=ANSWER_S)
            screenshot(display, ARTIFACTS / "window-service-2-after-restart.png")
            assert "6" in again, again
            assert gui.poll() is None, "the window died with the service"
            [model] = service.loaded()
            assert model["model"] == qwen.ref and model["pid"] != worker
            assert holding_weights(second_server.pid) == {model["pid"]: [weights]}
            assert holding_weights(gui.pid) == {}, "the window loaded a model of its own"

            # stopped and started again by hand, while the window stays connected
            stopped = ember(service.env, "service", "stop")
            assert stopped.stdout.strip() == "stopped", stopped.stdout + stopped.stderr
            started = ember(service.env, "service", "start")  # its port in TIME_WAIT
            assert started.returncode == 0, started.stdout + started.stderr
            third_server = service.endpoint()
            type_text(display, window, THIRD)
            last = wait_for_answer(home / "history.db", THIRD, timeout=ANSWER_S)
            assert "8" in last and gui.poll() is None, last
            [model] = service.loaded()
            assert holding_weights(third_server.pid) == {model["pid"]: [weights]}
            assert holding_weights(gui.pid) == {}, "the window loaded a model of its own"
            assert len(logged_by(paths, gui.pid, "joining the Ember service")) == 1
        finally:
            if gui.poll() is None:
                gui.terminate()
            try:
                gui.wait(timeout=30)
            except subprocess.TimeoutExpired:
                gui.kill()
                gui.wait()
            console.seek(0)
            printed = console.read()
            console.close()
    assert not crash_reports(home), (crash_reports(home), printed[-3000:],
                                     service_log(paths)[-3000:])
