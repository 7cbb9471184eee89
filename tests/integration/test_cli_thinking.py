"""`ember run` and `ember chat` with a reasoning model, as a user runs them (a subprocess):
the thinking apart from the answer (dimmed on a terminal, on stderr in a pipe), --think,
--no-think and --think-effort reaching the model, and --json with reasoning and tool calls.
The model is remote, served by tests/support/fake_openai.py the way vLLM streams Qwen3."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Paths
from app.runtime import endpoints
from tests.support import REPO
from tests.support.fake_openai import ANSWER, THINKING, fake_server

THOUGHT = "".join(THINKING)


class Upstream:
    def __init__(self, home: Path, requests: list[dict]) -> None:
        self.home, self.requests = home, requests

    def ember(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO, input=stdin,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "EMBER_HOME": str(self.home)})


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Iterator[Upstream]:
    requests: list[dict] = []
    home = tmp_path_factory.mktemp("cli-thinking") / "home"
    with fake_server(requests=requests) as url:
        endpoints.add("lab", url, paths=Paths(home))
        yield Upstream(home, requests)


def test_run_json_has_the_reasoning_apart_from_the_text(upstream):
    r = upstream.ember("run", "lab/think", "Hi", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["text"] == "".join(ANSWER) and out["reasoning"] == THOUGHT
    assert out["tool_calls"] == [] and out["reasoning_tokens"] == 4
    assert out["finish_reason"] == "stop"
    assert "chat_template_kwargs" not in upstream.requests[-1]  # the model's default


def test_run_json_has_the_tool_calls_with_their_arguments(upstream):
    r = upstream.ember("run", "lab/tool", "Weather and time in Paris?", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["finish_reason"] == "tool_calls" and out["text"] == ""
    assert [(c["id"], c["name"]) for c in out["tool_calls"]] == [
        ("call_ab12", "get_weather"), ("call_cd34", "get_time")]
    assert json.loads(out["tool_calls"][0]["arguments"]) == {"city": "Paris", "unit": "°C"}


def test_no_think_switches_thinking_off_in_the_models_template(upstream):
    r = upstream.ember("run", "lab/think", "Hi", "--no-think", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert upstream.requests[-1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert out["reasoning"] == "" and out["text"] == "".join(ANSWER)


def test_think_effort_reaches_the_model_and_conflicts_with_no_think(upstream):
    r = upstream.ember("run", "lab/think", "Hi", "--think-effort", "high", "--json")
    assert r.returncode == 0, r.stderr
    assert upstream.requests[-1]["reasoning_effort"] == "high"
    assert upstream.requests[-1]["chat_template_kwargs"] == {"enable_thinking": True}
    bad = upstream.ember("run", "lab/think", "Hi", "--no-think", "--think-effort", "low")
    assert bad.returncode == 2 and "pick one" in bad.stderr


def test_in_a_pipe_stdout_gets_the_answer_alone_and_the_thinking_goes_to_stderr(upstream):
    r = upstream.ember("run", "lab/think", "Hi")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "".join(ANSWER) + "\n"
    assert f"Thinking…\n{THOUGHT}\n…done thinking." in r.stderr
    assert "\x1b[" not in r.stdout + r.stderr
    hidden = upstream.ember("run", "lab/think", "Hi", "--hide-thinking")
    assert hidden.stdout == "".join(ANSWER) + "\n" and THOUGHT not in hidden.stderr


def test_on_a_terminal_the_thinking_is_dimmed_before_the_answer(upstream):
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "run", "lab/think", "Hi"],
                            cwd=REPO, stdout=child, stderr=subprocess.PIPE,
                            env={**os.environ, "EMBER_HOME": str(upstream.home)})
    os.close(child)
    seen = b""
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:  # the child closed its end
            break
        if not data:
            break
        seen += data
    os.close(main)
    assert proc.wait(60) == 0
    screen = seen.decode().replace("\r\n", "\n")
    assert screen == f"\x1b[2mThinking…\n{THOUGHT}\x1b[22m\n\n{''.join(ANSWER)}\n"


def test_chat_thinks_can_be_switched_off_and_gives_the_thinking_back(upstream):
    r = upstream.ember("chat", "lab/think", stdin="Hi\n/think off\nHi again\n/bye\n")
    assert r.returncode == 0, r.stderr
    assert "(thinking: off)" in r.stdout and r.stderr.count(THOUGHT) == 1
    second = upstream.requests[-1]
    assert second["chat_template_kwargs"] == {"enable_thinking": False}
    assert second["messages"][1] == {"role": "assistant", "content": "".join(ANSWER),
                                     "reasoning_content": THOUGHT}
