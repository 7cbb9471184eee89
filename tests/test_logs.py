"""Ember's log (app.logs): one file in the data folder, written by the `ember` command, the
server, the Runtime and its worker processes; each test does the thing, then reads the file."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app import logs
from app.config import Paths
from app.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
SECRET = "zanzibar-marmalade"  # in prompts: it must never reach the log
KEY = "sk-test-key-never-logged"


def ember(home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "EMBER_HOME": str(home), **(env or {})})


def lines(file: Path, level: str | None = None) -> list[str]:
    found = file.read_text(encoding="utf-8").splitlines()
    return [ln for ln in found if level is None or f" {level} " in ln]


# -- configuration ---------------------------------------------------------------------------
def test_ember_log_takes_level_names_in_any_case_and_refuses_anything_else(monkeypatch):
    for raw, level in [("", logging.INFO), ("debug", logging.DEBUG), ("INFO", logging.INFO),
                       ("Warning", logging.WARNING), ("error", logging.ERROR)]:
        monkeypatch.setenv("EMBER_LOG", raw)
        assert logs.env_level() == level
    monkeypatch.setenv("EMBER_LOG", "loud")
    with pytest.raises(ConfigError, match=r"EMBER_LOG='loud' is not a log level: use one of "
                                          r"debug, info, warning, error, critical"):
        logs.env_level()


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


def test_the_file_rotates_by_size_and_keeps_a_few_old_ones(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(logs, "MAX_BYTES", 4000)
    monkeypatch.setattr(logs, "BACKUPS", 2)
    logs.reset()
    try:
        file = logs.setup(home=Paths(tmp_path))
        assert file is not None
        for i in range(300):  # ~100 bytes a line: about 7 files' worth
            logging.getLogger("app.test").info("line %03d %s", i, "x" * 40)
    finally:
        logs.reset()
    folder = tmp_path / "logs"
    assert sorted(p.name for p in folder.iterdir()) == ["ember.log", "ember.log.1", "ember.log.2"]
    for p in folder.iterdir():
        assert 0 < p.stat().st_size <= 4000
    # the newest lines in ember.log, the ones before them in ember.log.1
    assert "line 299" in (folder / "ember.log").read_text()
    last_of_1 = lines(folder / "ember.log.1")[-1]
    first_of_0 = lines(folder / "ember.log")[0]
    n = int(re.search(r"line (\d+)", first_of_0).group(1))
    assert f"line {n - 1:03d}" in last_of_1


def test_a_data_folder_that_cannot_hold_the_log_warns_and_ember_runs_on(tmp_path: Path, capsys):
    (tmp_path / "logs").write_text("a file where the folder should be")
    logs.reset()
    try:
        assert logs.setup(home=Paths(tmp_path)) is None
        logging.getLogger("app.test").info("goes nowhere, raises nothing")
    finally:
        logs.reset()
    err = capsys.readouterr().err
    assert err.startswith(f"warning: cannot write the log file {tmp_path / 'logs' / 'ember.log'}")
