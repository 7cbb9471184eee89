"""Cold start of the window, frozen bundle vs the development venv, and the first prompt's
time to first token, on a real X server (Xvfb). Prints JSON.

    python benchmarks/bundle_start.py --bundle build/packaging-test/dist/ember/ember \
        --venv .venv/bin/ember --repeat 5

"To window" is from the process start to its window being mapped on the X server (what a
double-click waits for), with the data folder of a machine Ember has seen before
(hardware.json present); the very first start, which also measures the memory bandwidth, is
reported apart. The two are run alternately, so load from elsewhere hits both alike;
the OS page cache is warm after the first run of each (run once more with --repeat 1 after
`echo 3 > /proc/sys/vm/drop_caches` for a truly cold start). The first prompt is typed into
each window once, with the 0.5B model; its time to first token is what the window stored in
history.db (model load included: the first prompt loads the model).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.config import Paths
from app.hardware import cpu_name
from app.store import Store
from tests.support.desktop import (
    MAIN_WINDOW,
    desktop_env,
    find_window,
    home_with_model,
    type_text,
    wait_for_answer,
    xvfb,
)
from tests.support.models import QWEN, TEST_HOME

PROMPT = "Write a Python function that adds two numbers."


def to_window(binary: str, display: str, home: Path, title: str | None = None) -> float:
    """Seconds to the first window of Ember's class (the splash on a first start), or to the
    one titled `title`."""
    started = time.monotonic()
    app = subprocess.Popen([binary], env=desktop_env(display, home),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        find_window(display, "ember", timeout=60, title=title)
        return time.monotonic() - started
    finally:
        app.terminate()
        app.wait(30)


def first_prompt(binary: str, display: str, home: Path) -> dict:
    app = subprocess.Popen([binary], env=desktop_env(display, home),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        window, _ = find_window(display, "ember", timeout=60, title=MAIN_WINDOW)
        type_text(display, window, PROMPT)
        wait_for_answer(home / "history.db", PROMPT, timeout=300)
        with sqlite3.connect(home / "history.db") as db:
            stats = json.loads(db.execute("SELECT stats FROM messages WHERE role='assistant' "
                                          "ORDER BY id DESC LIMIT 1").fetchone()[0])
        return {k: stats[k] for k in ("ttft_s", "decode_tokens_per_s", "completion_tokens")}
    finally:
        app.terminate()
        app.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True, help="the bundle's ember binary")
    ap.add_argument("--venv", default=str(Path(sys.prefix) / "bin" / "ember"),
                    help="the venv's ember script")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    model = next(m for m in Store(Paths(TEST_HOME)).list() if m.id == QWEN and m.format == "gguf")
    legs = {"frozen": args.bundle, "venv": args.venv}
    times: dict[str, list[float]] = {name: [] for name in legs}
    prompts: dict[str, dict] = {}
    first: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, xvfb() as display:
        for name, binary in legs.items():
            # the very first start also measures the memory bandwidth (then kept in
            # hardware.json) behind a splash: the splash, then the window, once each
            first[name] = to_window(binary, display, home_with_model(Path(tmp) / name, model))
            first[name + " main window"] = to_window(
                binary, display, home_with_model(Path(tmp) / f"{name}-main", model), MAIN_WINDOW)
        for i in range(args.repeat):
            for name, binary in legs.items():
                home = home_with_model(Path(tmp) / f"{name}-{i}", model)
                (home / "config.toml").write_text("[app]\nmax_tokens = 48\ntemperature = 0.0\n")
                shutil.copy2(Path(tmp) / f"{name}-main" / "hardware.json", home / "hardware.json")
                assert "bandwidth" in (home / "hardware.json").read_text()
                times[name].append(to_window(binary, display, home))
        for name, binary in legs.items():
            home = home_with_model(Path(tmp) / f"{name}-prompt", model)
            (home / "config.toml").write_text("[app]\nmax_tokens = 48\ntemperature = 0.0\n")
            prompts[name] = first_prompt(binary, display, home)
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(json.dumps({
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "cpu_model": cpu_name(), "cores": os.cpu_count()},
        "to_window_s": {name: {"median": round(medians[name], 3),
                               "runs": [round(t, 3) for t in runs]}
                        for name, runs in times.items()},
        "frozen_vs_venv": round(medians["frozen"] / medians["venv"], 3),
        "first_start_s": {name: round(t, 3) for name, t in first.items()},
        "first_prompt": prompts,
    }, indent=1))


if __name__ == "__main__":
    main()
