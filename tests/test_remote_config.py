"""`ember remote add/list/rm` and config.toml: endpoints are saved safely, and the user's other
settings and comments survive every edit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from app import endpoints
from app.config import Paths
from app.errors import ConfigError, ModelNotFoundError
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
        assert "7 models: gpu/ok, gpu/slow" in added.stdout
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


def test_a_broken_config_toml_is_reported_and_never_overwritten(tmp_path):
    paths = Paths(tmp_path)
    paths.config_file.write_text("[remotes\nurl = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        endpoints.add("lab", "http://h:8000", paths=paths)
    assert paths.config_file.read_text() == "[remotes\nurl = "


def test_add_replaces_an_endpoint_and_resolve_splits_name_and_model(tmp_path):
    paths = Paths(tmp_path)
    endpoints.add("lab", "http://a:1/v1", "k1", paths=paths)
    endpoints.add("lab", "http://b:2/v1", paths=paths)
    endpoint, model = endpoints.resolve("lab/meta-llama/Llama-3.1-8B-Instruct", paths)
    assert (endpoint.url, endpoint.api_key) == ("http://b:2/v1", None)
    assert model == "meta-llama/Llama-3.1-8B-Instruct"  # the model part keeps its slashes
    with pytest.raises(ModelNotFoundError, match="did you mean lab"):
        endpoints.resolve("labb/x", paths)


def test_an_endpoint_without_a_url_in_config_toml_is_a_config_error(tmp_path):
    paths = Paths(tmp_path)
    paths.config_file.write_text('[endpoints.lab]\napi_key = "k"\n')
    with pytest.raises(ConfigError, match=r"\[endpoints.lab\]: needs url"):
        endpoints.endpoints(paths)


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
