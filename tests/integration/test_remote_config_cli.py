"""`ember remote add/list/rm` and `ember run` on a remote model, as a user runs them (a
subprocess): endpoints are saved safely, and the user's other settings and comments survive
every edit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support import REPO
from tests.support.fake_openai import MODELS, fake_server

USER_CONFIG = """\
# my Ember settings
[ui]
theme = "dark"  # keep me

[models."qwen2.5-coder-0.5b-instruct"]
backend = "llamacpp"
"""


def ember(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "EMBER_HOME": str(home)})


def test_remote_add_list_rm_round_trip_keeps_the_users_other_settings(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(USER_CONFIG)
    with fake_server() as url:
        added = ember(home, "remote", "add", "gpu", url, "--api-key", "sk-secret-1234")
        assert added.returncode == 0, added.stderr
        assert f"added remote gpu -> {url} (key ****1234)" in added.stdout
        assert f"{len(MODELS)} models: gpu/ok, gpu/slow" in added.stdout
        listed = ember(home, "remote", "list", "--json")
        assert json.loads(listed.stdout) == [{"name": "gpu", "url": url, "api_key": True,
                                              "models": list(MODELS), "error": None}]
    text = (home / "config.toml").read_text()
    assert text.startswith(USER_CONFIG)  # comments, order and keys as the user wrote them
    saved = tomllib.loads(text)
    assert saved["remotes"]["gpu"] == {"url": url, "api_key": "sk-secret-1234"}
    assert (home / "config.toml").stat().st_mode & 0o777 == 0o600  # it holds an API key
    removed = ember(home, "remote", "rm", "gpu")
    assert removed.returncode == 0 and f"removed remote gpu ({url})" in removed.stdout
    assert (home / "config.toml").read_text().strip() == USER_CONFIG.strip()


def test_remote_list_says_which_endpoint_is_down_without_failing(tmp_path):
    home = tmp_path / "home"
    assert ember(home, "remote", "add", "down", "http://127.0.0.1:9/v1").returncode == 0
    r = ember(home, "remote", "list")
    assert r.returncode == 0
    assert "down" in r.stdout and "error: remote 'down'" in r.stdout
    assert "cannot connect" in r.stdout


def test_bad_names_urls_and_unknown_endpoints_are_one_clear_line(tmp_path):
    home = tmp_path / "home"
    bad_name = ember(home, "remote", "add", "My Box", "http://h:1")
    assert bad_name.returncode == 1 and bad_name.stderr.startswith(
        "error: invalid remote name 'My Box'")
    bad_url = ember(home, "remote", "add", "box", "gpu-box:8000")
    assert bad_url.returncode == 1 and "invalid remote URL 'gpu-box:8000'" in bad_url.stderr
    unknown = ember(home, "remote", "rm", "nope")
    assert unknown.returncode == 1
    assert unknown.stderr == "error: no remote endpoint 'nope' (known: none)\n"
    assert "Traceback" not in bad_name.stderr + bad_url.stderr + unknown.stderr
    assert not (home / "config.toml").exists()  # nothing was written for bad input


def test_ember_run_on_a_stream_that_drops_prints_the_partial_answer_then_one_error_line(
        tmp_path):
    home = tmp_path / "home"
    with fake_server() as url:
        assert ember(home, "remote", "add", "fake", url, "--no-check").returncode == 0
        r = ember(home, "run", "fake/drop", "hi")
        down = ember(home, "run", "nowhere/model", "hi")
    assert r.returncode == 1
    assert r.stdout == "The answer is \n"
    assert r.stderr.startswith("error: remote 'fake'") and "connection dropped" in r.stderr
    assert len(r.stderr.splitlines()) == 1
    assert down.returncode == 1 and down.stderr.startswith(
        "error: unknown model 'nowhere' in the remote endpoints")
