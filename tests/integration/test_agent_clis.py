"""The real coding agents against `ember serve`, with no tuning beyond the base URL and a
key (issue 38): Claude Code (npm @anthropic-ai/claude-code, the Anthropic Messages API) and
Codex (npm @openai/codex, the Responses API), pinned and installed by
packaging/agent_clis.sh, each answer a one-shot prompt on the 0.5B without an API error.
Both share one server. An agent's first request is a 7-12k-token prefill: Claude Code 2.1
sends one request of 11.6k tokens (its system prompt and 12 tools, 48.9 KB), which took 308 s
on 2 cores (AMD EPYC; prefill falls from 74 to about 25 tokens/s as the context fills), and
its second session 92 s, from the first one's cache."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.live_server import live_server

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Reply with the single word: pong"
AGENT_TIMEOUT_S = 900  # a 12k-token prefill, twice over for two agents, on a busy machine


@pytest.fixture(scope="module")
def agent_bin() -> Path:
    out = subprocess.run(["bash", str(ROOT / "packaging" / "agent_clis.sh")], check=True,
                         capture_output=True, text=True, timeout=600)
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def agent_server(store, qwen) -> Iterator[str]:
    with live_server(store, parallel=2) as (url, _runtime):
        yield url


def run_agent(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run(argv, env={"PATH": os.environ["PATH"], **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=AGENT_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def served(url: str, endpoint: str) -> int:
    metrics = httpx.get(url + "/metrics").text
    return sum(int(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(f'ember_requests_total{{endpoint="{endpoint}"'))


def metric(url: str, name: str) -> int:
    line = next(line for line in httpx.get(url + "/metrics").text.splitlines()
                if line.startswith(name + " "))
    return int(line.split()[1])


def test_claude_code_answers_and_a_second_session_reuses_its_prefix(agent_bin, agent_server,
                                                                    qwen, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()

    def claude(prompt: str) -> tuple[int, str, float]:
        return run_agent(
            [str(agent_bin / "claude"), "-p", prompt, "--model", qwen.ref],
            {"HOME": str(home), "ANTHROPIC_BASE_URL": agent_server,
             "ANTHROPIC_AUTH_TOKEN": "ember", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
            work)

    code, output, took = claude(PROMPT)
    print(f"claude -p: exit {code} in {took:.0f} s: {output[-600:]}")
    assert code == 0 and "API Error" not in output, output[-2000:]
    assert served(agent_server, "messages") >= 1
    # another session, another prompt: everything before the prompt's text (system prompt,
    # tools and reminders, about 9.5k of the 11.6k tokens; Claude Code's environment is a
    # system turn after the prompt) comes from the first session's cache
    before = metric(agent_server, "ember_cached_prompt_tokens_total")
    code, output, took = claude("Reply with the single word: ping")
    reused = metric(agent_server, "ember_cached_prompt_tokens_total") - before
    print(f"second claude -p: exit {code} in {took:.0f} s, {reused} prompt tokens reused")
    assert code == 0 and "API Error" not in output, output[-2000:]
    assert reused >= 9_000


def test_codex_answers_a_one_shot_prompt(agent_bin, agent_server, qwen, tmp_path):
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    provider = (f'model_providers.ember={{name="Ember", base_url="{agent_server}/v1", '
                'wire_api="responses", env_key="EMBER_API_KEY"}')
    code, output, took = run_agent(
        [str(agent_bin / "codex"), "exec", "--skip-git-repo-check", "-c", provider,
         "-c", "model_provider=ember", "-m", qwen.ref, PROMPT],
        {"HOME": str(home), "CODEX_HOME": str(home), "EMBER_API_KEY": "ember"}, work)
    print(f"codex exec: exit {code} in {took:.0f} s: {output[-600:]}")
    assert code == 0 and "ERROR" not in output, output[-2000:]
    assert served(agent_server, "responses") >= 1
