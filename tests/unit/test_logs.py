"""Ember's log (app.logs) without a model or a process: the EMBER_LOG levels, rotation by
size, and a data folder that cannot hold the log. The rest, with the `ember` command, the
Runtime's workers and the server, is tests/integration/test_logs_real_processes.py."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from app import logs
from app.config import Paths
from app.errors import ConfigError


def test_ember_log_takes_level_names_in_any_case_and_refuses_anything_else(monkeypatch):
    for raw, level in [("", logging.INFO), ("debug", logging.DEBUG), ("INFO", logging.INFO),
                       ("Warning", logging.WARNING), ("error", logging.ERROR)]:
        monkeypatch.setenv("EMBER_LOG", raw)
        assert logs.env_level() == level
    monkeypatch.setenv("EMBER_LOG", "loud")
    with pytest.raises(ConfigError, match=r"EMBER_LOG='loud' is not a log level: use one of "
                                          r"debug, info, warning, error, critical"):
        logs.env_level()


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


def lines(file: Path, level: str | None = None) -> list[str]:
    found = file.read_text(encoding="utf-8").splitlines()
    return [ln for ln in found if level is None or f" {level} " in ln]
