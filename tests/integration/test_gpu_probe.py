"""The child process that asks llama.cpp's backends for GPUs (app.runtime.gpu_devices.ask), as
the first start's splash waits on it: its time limit holds for the devices and their copy
bandwidths together. The real probe on lavapipe: tests/integration/test_llama_vulkan.py."""

from __future__ import annotations

import logging
import re
import time
from multiprocessing.connection import Connection

import pytest

from app.runtime import gpu_devices


def child_that_hangs_measuring(conn: Connection) -> None:
    """A probe whose slow driver lists its devices after 3 s, then hangs in the copy (spawned
    by name)."""
    time.sleep(3)
    conn.send({"devices": [], "failed": []})
    time.sleep(60)


def test_the_probe_waits_its_time_once_for_devices_and_bandwidths_together(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """A driver that hangs measuring costs what is left of the probe's time, not a second
    PROBE_SECONDS (the splash waited up to two minutes); and the log says how long."""
    monkeypatch.setattr(gpu_devices, "_child", child_that_hangs_measuring)
    timeout = 6.0
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="app.runtime.gpu_devices"):
        report = gpu_devices.ask(timeout)
    took = time.monotonic() - started
    assert report.error is None and report.devices == ()
    assert took < timeout + 1.5, took  # waited twice, it took 3 s + 6 s and more
    assert re.search(r"llama.cpp's GPU probe: 0 device\(s\) in \d+\.\d s", caplog.text)
    assert "no answer in the" in caplog.text
