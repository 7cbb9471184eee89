"""The resident memory the status bar and /metrics show for a worker process."""

from __future__ import annotations

import os
import subprocess
import sys

from app.runtime.worker_memory import resident_bytes


def test_a_running_process_reports_its_resident_memory():
    here = resident_bytes(os.getpid())
    assert 10e6 < here < 20e9  # a Python process with its imports: tens of MB at least


def test_a_process_that_holds_more_memory_reports_more():
    code = "import sys, time; block = bytearray(200_000_000); print(1, flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "1"
        assert resident_bytes(child.pid) > 200_000_000
    finally:
        child.kill()
        child.wait()


def test_no_pid_or_a_process_that_is_gone_is_zero_not_an_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert resident_bytes(child.pid) == 0
    assert resident_bytes(None) == 0
