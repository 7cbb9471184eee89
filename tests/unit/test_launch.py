"""`ember launch AGENT`: what each coding agent is given to talk to Ember (app.agents), the
model checked before anything starts, the server found on the port (app.agent_server), and
the agent run with the variables and files it needs, its exit status passed on. Models are
tiny GGUF files with a chat template; the server is Ember's own app on a free port."""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.agent_server import running_ember
from app.agents import AGENTS, agent_setup, claude_output_tokens, working_room
from app.cli import main
from app.store import Store
from backends.errors import EmberError
from tests.support.live_server import free_port, live_server
from tests.support.tiny_gguf import write_tiny_gguf

URL = "http://127.0.0.1:11435"
HERMES = ("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"
          "{# <tool_call>\n{\"name\": .. #}")
PLAIN = "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"


def install(tmp_path: Path, name: str, template: str | None, context_length: int = 256) -> str:
    model = Store().import_gguf(write_tiny_gguf(tmp_path / f"{name}.gguf", name=name,
                                                chat_template=template,
                                                context_length=context_length))
    return model.id


def ember(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          *args: str) -> tuple[int, str, str]:
    """`ember ARGS` as the console script runs it (app.cli.main), in this process."""
    monkeypatch.setattr(sys, "argv", ["ember", *args])
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


# -- what each agent gets -------------------------------------------------------------------
def test_claude_code_gets_the_anthropic_variables_and_every_model_name_is_ember_s(tmp_path):
    setup = agent_setup("claude", URL, "qwen-coder", 32768, None, tmp_path)
    assert setup.env == {
        "ANTHROPIC_BASE_URL": URL, "ANTHROPIC_AUTH_TOKEN": "ember", "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_MODEL": "qwen-coder", "ANTHROPIC_DEFAULT_HAIKU_MODEL": "qwen-coder",
        "ANTHROPIC_SMALL_FAST_MODEL": "qwen-coder", "ANTHROPIC_DEFAULT_SONNET_MODEL": "qwen-coder",
        "ANTHROPIC_DEFAULT_OPUS_MODEL": "qwen-coder", "CLAUDE_CODE_SUBAGENT_MODEL": "qwen-coder",
        # its window (it assumes 1M for a model it does not know) and an answer cap that
        # leaves its compaction reserve room in a 32k window
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "32768", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    assert setup.args == [] and setup.files == {}
    keyed = agent_setup("claude", URL, "qwen-coder", 131072, "sekrit", tmp_path)
    assert keyed.env["ANTHROPIC_AUTH_TOKEN"] == "sekrit"
    assert keyed.env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "131072"
    assert keyed.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "16384"


def test_claude_code_s_room_before_compacting_matches_what_its_context_command_shows():
    # `claude -p /context` (2.1.328) with CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768 and the output
    # cap 4096 showed an "Autocompact buffer" of 17.1k; 65536/8192: 21.2k; the default cap
    # (32000): 33k. Its first request is about 12k tokens.
    claude = AGENTS["claude"]
    assert [claude_output_tokens(c) for c in (8192, 32768, 65536, 131072, 1_000_000)] == [
        4096, 4096, 8192, 16384, 32000]
    assert working_room(claude, 32768) == 32768 - 12_000 - 17_096
    assert working_room(claude, 65536) == 65536 - 12_000 - 21_192
    assert working_room(claude, 1_000_000) == 1_000_000 - 12_000 - 33_000
    # Codex compacts at 90% of its window
    assert working_room(AGENTS["codex"], 32768) == 29491 - 8_000


def test_codex_gets_a_provider_of_its_own_through_config_overrides(tmp_path):
    setup = agent_setup("codex", URL, "qwen-coder", 32768, "sekrit", tmp_path)
    assert setup.env == {"EMBER_API_KEY": "sekrit"} and setup.files == {}
    assert setup.args[-2:] == ["-m", "qwen-coder"]
    overrides = dict(a.split("=", 1) for a in setup.args[1:-2:2])
    assert setup.args[:-2:2] == ["-c"] * 4
    # each value as Codex parses it: TOML
    parsed = {k: tomllib.loads(f"v = {v}")["v"] if k != "model_provider" else v
              for k, v in overrides.items()}
    assert parsed == {
        "model_provider": "ember",
        "model_providers.ember": {"name": "Ember", "base_url": f"{URL}/v1",
                                  "wire_api": "responses", "env_key": "EMBER_API_KEY"},
        "model_context_window": 32768, "model_auto_compact_token_limit": 29491}


def test_opencode_reads_a_config_in_ember_s_folder_that_holds_no_key(tmp_path):
    setup = agent_setup("opencode", URL, "qwen-coder", 32768, "sekrit", tmp_path)
    path = tmp_path / "opencode.json"
    assert setup.env == {"OPENCODE_CONFIG": str(path), "EMBER_API_KEY": "sekrit"}
    assert list(setup.files) == [path] and "sekrit" not in setup.files[path]
    assert json.loads(setup.files[path]) == {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"ember": {
            "npm": "@ai-sdk/openai-compatible", "name": "Ember",
            "options": {"baseURL": f"{URL}/v1", "apiKey": "{env:EMBER_API_KEY}"},
            "models": {"qwen-coder": {"name": "qwen-coder", "tool_call": True,
                                      "limit": {"context": 32768, "output": 8192}}}}},
        "model": "ember/qwen-coder", "small_model": "ember/qwen-coder"}


def test_aider_gets_the_openai_variables_and_the_model_s_context_in_its_metadata(tmp_path):
    setup = agent_setup("aider", URL, "qwen-coder", 8192, None, tmp_path)
    path = tmp_path / "aider-model-metadata.json"
    assert setup.env == {"OPENAI_API_BASE": f"{URL}/v1", "OPENAI_API_KEY": "ember"}
    assert setup.args == ["--model", "openai/qwen-coder", "--model-metadata-file", str(path)]
    assert json.loads(setup.files[path]) == {"openai/qwen-coder": {
        "max_input_tokens": 8192, "max_tokens": 8192, "max_output_tokens": 2048,
        "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
        "litellm_provider": "openai", "mode": "chat"}}


# -- the command ----------------------------------------------------------------------------
def test_print_env_shows_the_variables_and_command_with_the_key_masked(
        isolated_home, tmp_path, monkeypatch, capsys):
    model = install(tmp_path, "Tool Model", HERMES)
    port = free_port()
    code, out, err = ember(monkeypatch, capsys, "launch", "codex", "--model", model,
                           "--port", str(port), "--api-key", "sekrit", "--print-env",
                           "--", "exec", "fix the bug")
    assert code == 0 and "sekrit" not in out + err
    assert "export EMBER_API_KEY='****'" in out.splitlines()
    assert out.splitlines()[-1].startswith("codex -c model_provider=ember")
    assert out.splitlines()[-1].endswith(f"-m {model} exec 'fix the bug'")
    assert f"nothing answers on http://127.0.0.1:{port}" in out
    # the tiny model's context is far below an agent's prompt: said, not refused
    assert "Codex's first request alone is about 8,000 tokens, so it does not fit" in err


def test_a_missing_agent_says_how_to_install_it(isolated_home, tmp_path, monkeypatch, capsys):
    model = install(tmp_path, "Tool Model", HERMES)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, out, err = ember(monkeypatch, capsys, "launch", "claude", "--model", model)
    assert code == 1
    assert err == ("error: Claude Code is not installed (claude is not on PATH); install it "
                   "with: npm install -g @anthropic-ai/claude-code\n")


def test_a_model_without_tool_calls_is_refused_for_tool_agents_and_aider_needs_chat(
        isolated_home, tmp_path, monkeypatch, capsys):
    model = install(tmp_path, "Base Model", None)  # no chat template: no tool calls
    code, out, err = ember(monkeypatch, capsys, "launch", "claude", "--model", model,
                           "--print-env")
    assert (code, out) == (1, "")
    assert err == (f"error: {model}:ALL_F32 cannot call tools (it has no chat template: a base "
                   "model), and Claude Code works through tool calls\n")
    code, out, err = ember(monkeypatch, capsys, "launch", "aider", "--model", model,
                           "--print-env")
    assert code == 1 and "aider needs a chat model" in err


def test_tools_described_in_the_prompt_are_a_warning_for_tool_agents_only(
        isolated_home, tmp_path, monkeypatch, capsys):
    model = install(tmp_path, "Plain Model", PLAIN)  # Ember's generic tool format
    code, out, err = ember(monkeypatch, capsys, "launch", "opencode", "--model", model,
                           "--print-env")
    assert code == 0 and "has no tool calls of its own" in err
    code, out, err = ember(monkeypatch, capsys, "launch", "aider", "--model", model,
                           "--print-env")
    assert code == 0 and "tool calls" not in err
    assert f"aider --model openai/{model}" in out.splitlines()[-1]


def test_a_window_that_leaves_claude_code_little_room_is_a_warning_naming_the_room(
        isolated_home, tmp_path, monkeypatch, capsys):
    model = install(tmp_path, "Tool Model", HERMES, context_length=32768)
    code, out, err = ember(monkeypatch, capsys, "launch", "claude", "--model", model,
                           "--print-env")
    assert code == 0
    assert err == (f"warning: {model}:ALL_F32 gets at most 32,768 tokens of context on this "
                   "machine; after Claude Code's own prompt and the room it keeps for "
                   "compacting, about 3,672 tokens are left for the work, so it compacts the "
                   "conversation often (a model with a longer context does better)\n")
    assert "export CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768" in out.splitlines()
    code, out, err = ember(monkeypatch, capsys, "launch", "codex", "--model", model,
                           "--print-env")
    assert (code, err) == (0, "")  # Codex keeps 10% free: room enough


def test_a_model_not_installed_names_the_pull(isolated_home, monkeypatch, capsys):
    code, out, err = ember(monkeypatch, capsys, "launch", "opencode", "--model", "nope-7b",
                           "--print-env")
    assert (code, err) == (1, "error: nope-7b is not installed: run `ember pull nope-7b` "
                              "first\n")


def test_an_unknown_agent_is_refused_by_name(isolated_home, monkeypatch, capsys):
    code, out, err = ember(monkeypatch, capsys, "launch", "cursor")
    assert code == 2
    assert "Invalid value for '{claude|codex|opencode|aider}': 'cursor'" in err


# -- the server -----------------------------------------------------------------------------
@pytest.fixture
def not_ember() -> Iterator[str]:
    """Some other web server on a free port."""
    server = http.server.HTTPServer(("127.0.0.1", free_port()),
                                    http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_a_running_ember_server_is_found_and_its_key_checked(isolated_home, not_ember):
    from app import __version__

    store = Store()
    with live_server(store) as (url, _):
        assert running_ember(url, None) == __version__
    with live_server(store, api_key="sekrit") as (url, _):
        assert running_ember(url, "sekrit") == __version__
        with pytest.raises(EmberError, match="wants an API key: pass --api-key"):
            running_ember(url, None)
        with pytest.raises(EmberError, match="and refuses this one"):
            running_ember(url, "wrong")
    assert running_ember(f"http://127.0.0.1:{free_port()}", None) is None
    with pytest.raises(EmberError, match="something that is not Ember answers"):
        running_ember(not_ember, None)


def test_the_agent_runs_on_the_running_server_and_its_exit_status_is_ember_s(
        isolated_home, tmp_path, monkeypatch, capsys):
    """A stand-in `opencode` on PATH records what it was given and exits 3."""
    model = install(tmp_path, "Tool Model", HERMES)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "record.json"
    agent = bin_dir / "opencode"
    agent.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                     f"config = open(os.environ['OPENCODE_CONFIG']).read()\n"
                     f"json.dump({{'args': sys.argv[1:], 'env': dict(os.environ), "
                     f"'config': json.loads(config)}}, open({str(record)!r}, 'w'))\n"
                     "sys.exit(3)\n")
    agent.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with live_server(Store()) as (url, _):
        port = url.rsplit(":", 1)[1]
        code, out, err = ember(monkeypatch, capsys, "launch", "opencode", "--model", model,
                               "--port", port, "--", "run", "hello")
    assert code == 3
    seen = json.loads(record.read_text())
    assert seen["args"] == ["run", "hello"]
    assert seen["env"]["EMBER_API_KEY"] == "ember"
    assert seen["config"]["provider"]["ember"]["options"]["baseURL"] == f"{url}/v1"
    assert seen["config"]["model"] == f"ember/{model}"
    assert "starting `ember serve`" not in err  # the running server was used
