"""One tool round per real coding agent against `ember serve`: the agent reads a file in its
work folder and reports a value written in it (issue 38). Prints JSON.

    EMBER_HOME=~/.cache/ember/test-home .venv/bin/python benchmarks/agent_tool_round.py
        [--model qwen2.5-coder-1.5b-instruct] [--agents codex,claude] [--timeout 1500]

The agents are the pinned CLIs packaging/agent_clis.sh installs (Claude Code on the Anthropic
Messages API, Codex on the Responses API), each pointed at a fresh `ember serve` with only the
base URL and a key, in an empty work folder holding notes.txt. The prompt asks for the release
code written in it, which the model cannot know without reading the file; the round passes
when the agent exits 0 and its output carries the code. Reported per agent: exit status,
seconds, whether the code came back, the requests the server answered and the prompt tokens
it read and reused (from /metrics), and the output's tail. Too long for CI on 2 cores (an
agent's 7-12k-token prompt on the 1.5B is minutes of prefill): a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script: `benchmarks` is not an installed package

from app.store import Store  # noqa: E402
from benchmarks.serve_load import free_port, running_server  # noqa: E402

CODE = "QUARTZ-7319"
NOTES = f"Release checklist\n\n- owner: platform team\n- release code: {CODE}\n- window: Friday\n"
PROMPT = ("Read the file notes.txt in the current folder and reply with the release code "
          "written in it, nothing else.")
METRICS = ("ember_prompt_tokens_total", "ember_cached_prompt_tokens_total",
           "ember_completion_tokens_total")


def agent_bin() -> Path:
    out = subprocess.run(["bash", str(REPO / "packaging" / "agent_clis.sh")], check=True,
                         capture_output=True, text=True, timeout=900)
    return Path(out.stdout.strip().splitlines()[-1])


def metrics(url: str) -> dict[str, int]:
    """The token counters and the requests answered per endpoint, from /metrics."""
    out: dict[str, int] = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        name, _, value = line.rpartition(" ")
        if name in METRICS:
            out[name] = int(float(value))
        elif name.startswith("ember_requests_total{"):
            endpoint = name.split('endpoint="', 1)[1].split('"', 1)[0]
            out[f"requests_{endpoint}"] = out.get(f"requests_{endpoint}", 0) + int(float(value))
    return out


def command(agent: str, bin_dir: Path, url: str, model: str, home: Path) -> tuple[list[str],
                                                                                dict[str, str]]:
    """The agent's command line and environment: the base URL and a key, nothing more."""
    if agent == "claude":
        return ([str(bin_dir / "claude"), "-p", PROMPT, "--model", model,
                 "--allowedTools", "Read"],
                {"HOME": str(home), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": "ember",
                 "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
    provider = (f'model_providers.ember={{name="Ember", base_url="{url}/v1", '
                'wire_api="responses", env_key="EMBER_API_KEY"}')
    return ([str(bin_dir / "codex"), "exec", "--skip-git-repo-check", "-c", provider,
             "-c", "model_provider=ember", "-m", model, PROMPT],
            {"HOME": str(home), "CODEX_HOME": str(home), "EMBER_API_KEY": "ember"})


def as_text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def tool_round(agent: str, bin_dir: Path, url: str, model: str, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"ember-{agent}-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        (work / "notes.txt").write_text(NOTES, encoding="utf-8")
        argv, env = command(agent, bin_dir, url, model, home)
        before = metrics(url)
        started = time.monotonic()
        try:
            done = subprocess.run(argv, env={"PATH": os.environ["PATH"], **env}, cwd=work,
                                  capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as e:  # what it wrote so far (bytes or str)
            code, output = None, as_text(e.stdout) + as_text(e.stderr)
        took = time.monotonic() - started
        after = metrics(url)
    return {"agent": agent, "exit": code, "seconds": round(took, 1),
            "found_code": CODE in output and code == 0,
            "server": {k: after.get(k, 0) - before.get(k, 0) for k in after
                       if after.get(k, 0) != before.get(k, 0)},
            "output_tail": output[-600:]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--agents", default="codex,claude")
    parser.add_argument("--timeout", type=float, default=1500.0, help="seconds per agent")
    parser.add_argument("--context", type=int, default=16384)
    args = parser.parse_args()
    agents = [a for a in args.agents.split(",") if a]
    if unknown := [a for a in agents if a not in ("codex", "claude")]:
        parser.error(f"unknown agent(s) {', '.join(unknown)}: use codex and/or claude")
    model = Store().get(args.model)
    bin_dir = agent_bin()
    port = free_port()
    env = {**os.environ, "EMBER_CONTEXT": str(args.context)}
    serve = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--parallel", "2"]
    results = []
    with running_server(serve, env, port, model.id) as url:
        for agent in agents:
            print(f"agent_tool_round: {agent} on {model.id}", file=sys.stderr, flush=True)
            results.append(tool_round(agent, bin_dir, url, model.ref, args.timeout))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"model": model.id, "context": args.context,
                      "load_avg_1m": round(os.getloadavg()[0], 2), "rounds": results},
                     indent=2))


if __name__ == "__main__":
    main()
