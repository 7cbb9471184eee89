"""Ember's log (app.logs): one file in the data folder, written by the `ember` command, the
server, the Runtime and its worker processes; each test does the thing, then reads the file.
The model-free parts (levels, rotation) are tests/unit/test_logs.py."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app import logs
from app.config import Paths
from app.runtime import Runtime
from app.server.app import ServerSettings, create_app
from backends.base import ErrorEvent, GenerationRequest, Message, SamplingParams
from backends.errors import BackendError
from backends.llamacpp import cpu_variant, ggml_backends
from tests.support import LOOPBACK, REPO

SECRET = "zanzibar-marmalade"  # in prompts: it must never reach the log
KEY = "sk-test-key-never-logged"


def ask(text: str, max_tokens: int = 8) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),),
                             sampling=SamplingParams(temperature=0, max_tokens=max_tokens))


def ember(home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "EMBER_HOME": str(home), **(env or {})})


def lines(file: Path, level: str | None = None) -> list[str]:
    found = file.read_text(encoding="utf-8").splitlines()
    return [ln for ln in found if level is None or f" {level} " in ln]


@pytest.fixture
def debug_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Logging configured with EMBER_LOG=debug; the log file."""
    monkeypatch.setenv("EMBER_LOG", "debug")
    logs.reset()
    file = logs.setup(home=Paths(tmp_path / "home"))
    assert file == tmp_path / "home" / "logs" / "ember.log"
    yield file
    logs.reset()


# -- configuration ---------------------------------------------------------------------------


def test_an_invalid_ember_log_stops_the_command_with_one_clear_line(tmp_path: Path):
    r = ember(tmp_path, "list", env={"EMBER_LOG": "loud"})
    assert r.returncode == 1
    assert r.stderr == ("error: EMBER_LOG='loud' is not a log level: use one of debug, info, "
                        "warning, error, critical\n")


def test_the_ember_command_logs_its_command_name_but_never_its_arguments(tmp_path: Path):
    r = ember(tmp_path, "run", "no-such-model", f"tell me about {SECRET}",
              env={"EMBER_API_KEY": KEY})
    assert r.returncode == 1 and "unknown model" in r.stderr
    assert " app.cli " not in r.stderr  # nothing echoed without --verbose
    file = tmp_path / "logs" / "ember.log"
    (started,) = lines(file, "INFO")
    assert re.search(r"INFO +app\.cli \[\d+\] ember 0\.1\.0 run$", started)
    text = file.read_text()
    assert SECRET not in text and KEY not in text and not lines(file, "DEBUG")


def test_verbose_logs_debug_lines_and_echoes_them_to_stderr(tmp_path: Path):
    r = ember(tmp_path, "--verbose", "list")
    assert r.returncode == 0, r.stderr
    file = tmp_path / "logs" / "ember.log"
    debug = [ln for ln in lines(file, "DEBUG") if " app.logs " in ln]
    assert debug and debug[0].endswith(f"logging at DEBUG to {file}")
    assert debug[0] in r.stderr and "ember 0.1.0 list" in r.stderr


def test_ember_log_debug_writes_debug_lines_to_the_file_only(tmp_path: Path):
    r = ember(tmp_path, "list", env={"EMBER_LOG": "debug"})
    assert r.returncode == 0, r.stderr
    assert lines(tmp_path / "logs" / "ember.log", "DEBUG")
    assert "DEBUG" not in r.stderr


# -- the Runtime and its workers (the real Qwen2.5-Coder-0.5B-Instruct) ---------------------
def test_load_idle_unload_and_unload_are_logged_with_the_plan(debug_log: Path, store, qwen):
    with Runtime(store=store, idle_ttl_s=0) as rt:
        first = rt.load(qwen.ref, context=2048)
        rt.generate(qwen.ref, ask(f"Say {SECRET}.")).result()
        assert rt.unload_idle() == [qwen.ref]
        second = rt.load(qwen.ref, context=1024)
        assert rt.unload(qwen.ref)
    info = lines(debug_log, "INFO")
    ref = re.escape(qwen.ref)
    def build(pid: int) -> list[str]:
        """The worker's line naming the llama.cpp CPU build it loaded, where variants are
        installed (x86-64 Linux; packaging/install_llama_cpp.sh): chosen by itself, or the
        library path this process chose, which it inherits."""
        chosen = ([rf"backends\.llamacpp\.cpu_variant \[{pid}\] llama\.cpp (CPU build: \w+ "
                   r"\(.+\)|libraries from LLAMA_CPP_LIB_PATH=.+)$"]
                  if cpu_variant.chosen is not None else [])
        # a build whose backends load at run time names them and the devices they found
        loaded = ([rf"backends\.llamacpp\.ggml_backends \[{pid}\] llama\.cpp backends: "
                   r".*libggml-cpu\.so.*; devices: CPU \(.+\)"]
                  if ggml_backends.load_backends(gpu=False).dynamic else [])
        return chosen + loaded

    expected = [
        rf"app\.runtime\.worker_handle \[\d+\] worker pid {first.pid} started for {ref} "
        r"on llamacpp$",
        *build(first.pid),
        rf"loaded {ref} on llamacpp in \d+\.\d\d s: context 2048, \d+ threads, 0 GPU layers, "
        rf"parallel 1, \d\.\d\d GB planned \(worker pid {first.pid}\)$",
        rf"app\.runtime\.runtime \[\d+\] unloading {ref}: idle for \d+ s \(keep-alive 0 s\)$",
        rf"worker pid {second.pid} started for {ref} on llamacpp$",
        *build(second.pid),
        rf"loaded {ref} on llamacpp in .* context 1024, ",
        rf"unloading {ref} \(worker pid {second.pid}\): asked to$",
    ]
    assert len(info) == len(expected), "\n".join(info)
    for line, pattern in zip(info, expected, strict=True):
        assert re.search(pattern, line), (line, pattern)
    # the worker's own lines come over its pipe, with its own process id
    worker_lines = [ln for ln in lines(debug_log, "DEBUG") if " app.runtime.worker_main " in ln]
    assert any(f"[{first.pid}] {qwen.ref} loaded into llamacpp in" in ln for ln in worker_lines)
    assert any(f"[{second.pid}] unloading {qwen.ref}" in ln for ln in worker_lines)
    assert SECRET not in debug_log.read_text()


def test_a_crashed_worker_logs_the_signal_and_the_failed_request_then_the_restart(
        ember_log: Path, store, qwen):
    with Runtime(store=store) as rt:
        loaded = rt.load(qwen.ref, context=2048)
        events = []
        for event in rt.generate(qwen.ref, ask("Write a long story.", max_tokens=1000)):
            events.append(event)
            if len(events) == 3:
                os.kill(loaded.pid, signal.SIGSEGV)
        assert isinstance(events[-1], ErrorEvent) and events[-1].kind == "crash"
        text, _ = rt.generate(qwen.ref, ask("Say OK.")).result()
        restarted = rt.loaded()[0].pid
    assert text and restarted != loaded.pid
    ref = re.escape(qwen.ref)
    (crash,) = lines(ember_log, "ERROR")
    assert re.search(rf"app\.runtime\.worker_handle \[\d+\] worker pid {loaded.pid} running "
                     rf"{ref} on llamacpp was killed by SIGSEGV; requests in flight failed: 1$",
                     crash)
    (restart,) = [ln for ln in lines(ember_log, "WARNING") if "restarting" in ln]
    assert restart.endswith(f"restarting {qwen.ref} on llamacpp: its worker (pid {loaded.pid}) "
                            "is gone")
    text = ember_log.read_text()
    assert text.index(crash) < text.index(restart) < text.index(
        f"worker pid {restarted} started for {qwen.ref}")


def test_an_error_inside_the_worker_reaches_the_log_with_its_traceback(ember_log: Path,
                                                                        store, qwen):
    with Runtime(store=store) as rt:
        pid = rt.load(qwen.ref, context=1024).pid
        with pytest.raises(BackendError, match="AttributeError"):
            rt.tokenize(qwen.ref, None)  # type: ignore[arg-type]  # a bug of the caller's
        assert rt.tokenize(qwen.ref, "still alive")  # the worker goes on
    (error,) = lines(ember_log, "ERROR")
    assert error.endswith(f"app.runtime.worker_main [{pid}] tokenize failed")
    text = ember_log.read_text()
    tail = text[text.index(error):]
    assert "Traceback (most recent call last):" in tail and "AttributeError" in tail


def test_a_file_llama_cpp_rejects_is_logged_as_a_failed_load(ember_log: Path, isolated_home,
                                                             tmp_path: Path):
    from app.store import Store
    from tests.support.tiny_gguf import write_tiny_gguf

    store = Store(isolated_home)
    model = store.import_gguf(write_tiny_gguf(tmp_path / "hollow.gguf", name="Hollow"))
    with Runtime(store=store) as rt, pytest.raises(BackendError):
        rt.load(model.ref)
    (failed,) = lines(ember_log, "WARNING")
    assert re.search(r"could not load hollow:ALL_F32 on llamacpp \(worker pid \d+\): .*"
                     r"hollow\.gguf", failed)


def test_eviction_names_the_model_evicted_and_the_one_it_made_room_for(ember_log: Path,
                                                                       store, qwen, gemma):
    from app.fit import plan_load
    from app.gguf_file import read_gguf
    from app.hardware import HardwareProfile

    def small(ram_available: int) -> HardwareProfile:
        return HardwareProfile(os="t", machine="x86_64", cpu="t", physical_cores=2,
                               logical_cores=2, isa=("avx2",), ram_total=8 * 2**30,
                               ram_available=ram_available)

    need = [plan_load(read_gguf(m.path), small(60 * 2**30), 2048).memory_bytes
            for m in (qwen, gemma)]
    budget = max(need) + min(need) // 2  # room for one of them at a time
    with Runtime(store=store, hardware=small(int(budget / 0.9) + 1)) as rt:
        rt.load(qwen.ref, context=2048)
        rt.load(gemma.ref, context=2048)
        assert [m.model.ref for m in rt.loaded()] == [gemma.ref]
    evicted = [ln for ln in lines(ember_log, "INFO") if "evicting" in ln]
    assert len(evicted) == 1
    assert re.search(rf"app\.runtime\.runtime \[\d+\] evicting {re.escape(qwen.ref)} "
                     rf"\(idle \d+ s, \d\.\d\d GB\): {re.escape(gemma.ref)} needs \d\.\d\d GB "
                     r"and \d\.\d\d GB of the \d\.\d\d GB budget are in use$", evicted[0])


# -- the HTTP server ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def api(store, qwen) -> Iterator[TestClient]:
    with Runtime(store=store) as rt:
        app = create_app(rt, ServerSettings(api_key=KEY, owns_runtime=False, parallel=2))
        yield TestClient(app, base_url=LOOPBACK, headers={"Authorization": f"Bearer {KEY}"})


def request_lines(file: Path) -> list[str]:
    return [ln for ln in lines(file) if " app.server.access_log " in ln]


CHAT = {"messages": [{"role": "user", "content": f"Say {SECRET}."}], "temperature": 0,
        "max_tokens": 6}


def test_a_request_is_one_line_with_its_id_model_status_tokens_and_time(ember_log: Path,
                                                                         api, qwen):
    r = api.post("/v1/chat/completions", json={"model": qwen.id, **CHAT})
    assert r.status_code == 200
    usage = r.json()["usage"]
    (line,) = request_lines(ember_log)
    request_id = r.headers["x-request-id"]
    assert re.search(
        rf"INFO +app\.server\.access_log \[\d+\] request {request_id} POST /v1/chat/completions "
        rf"model={re.escape(qwen.id)} status=200 finish=(stop|length) "
        rf"prompt_tokens={usage['prompt_tokens']} "
        rf"completion_tokens={usage['completion_tokens']} seconds=\d+\.\d{{3}}$", line)
    text = ember_log.read_text()
    assert SECRET not in text and KEY not in text


def test_a_streamed_answer_is_logged_when_it_ends_with_its_tokens(ember_log: Path, api, qwen):
    with api.stream("POST", "/api/chat", json={
            "model": qwen.id, "messages": CHAT["messages"],
            "options": {"temperature": 0, "num_predict": 6}}) as r:
        assert r.status_code == 200
        final = [ln for ln in r.iter_lines() if ln][-1]
    done = json.loads(final)
    assert done["done"] is True
    (line,) = request_lines(ember_log)
    assert re.search(rf"request {r.headers['x-request-id']} POST /api/chat "
                     rf"model={re.escape(qwen.id)} status=200 finish=\w+ "
                     rf"prompt_tokens={done['prompt_eval_count']} "
                     rf"completion_tokens={done['eval_count']} seconds=", line)


def test_refused_and_failed_requests_are_logged_with_their_status(ember_log: Path, api, qwen):
    assert api.post("/v1/chat/completions", json={"model": qwen.id, **CHAT},
                    headers={"Authorization": "Bearer wrong-key"}).status_code == 401
    assert api.post("/v1/chat/completions", json={"model": "no-such-model", **CHAT}
                    ).status_code == 404
    r = api.post("/v1/embeddings", json={"model": qwen.id, "input": ["a", "b c"]})
    assert r.status_code == 200
    assert api.get("/health").status_code == 200  # polled by monitors: not at INFO
    refused, missing, embedded = request_lines(ember_log)
    assert re.search(r"POST /v1/chat/completions status=401 seconds=", refused)
    assert re.search(r"POST /v1/chat/completions model=no-such-model status=404 seconds=",
                     missing)
    tokens = r.json()["usage"]["prompt_tokens"]
    assert re.search(rf"POST /v1/embeddings model={re.escape(qwen.id)} status=200 "
                     rf"prompt_tokens={tokens} completion_tokens=0 seconds=", embedded)
    assert "wrong-key" not in ember_log.read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ember_serve_logs_its_requests_and_still_shows_a_bind_error(tmp_path: Path):
    port = free_port()
    env = {**os.environ, "EMBER_HOME": str(tmp_path)}
    env.pop("EMBER_LOG", None)
    command = [sys.executable, "-m", "app.cli", "serve", "--port", str(port)]
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            proc.terminate()
            pytest.fail(f"ember serve did not start: {proc.communicate(timeout=30)[1]}")
        second = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                                timeout=60)
    finally:
        proc.terminate()
        proc.wait(30)
    # the port was taken: uvicorn's error still reaches the terminal, and the log
    assert second.returncode != 0
    assert "address already in use" in second.stderr.lower()
    file = tmp_path / "logs" / "ember.log"
    text = file.read_text()
    assert f"serving on http://127.0.0.1:{port} (API key not required" in text
    assert re.search(r"request [0-9a-f]{8} GET /v1/models status=200 seconds=", text)
    assert [ln for ln in lines(file, "ERROR") if " uvicorn.error " in ln]
