"""The very first start measures the machine behind a splash instead of an empty screen;
later starts skip it (app/gui/first_start.py)."""

from __future__ import annotations

import json

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QSplashScreen

from app.config import Paths
from app.gui.first_start import MESSAGE, hardware_behind_splash


def visible_splashes() -> list[QSplashScreen]:
    return [w for w in QApplication.topLevelWidgets()
            if isinstance(w, QSplashScreen) and w.isVisible()]


def test_first_start_measures_behind_a_splash_then_never_again(qapp, isolated_home: Paths):
    seen: list[str] = []
    watch = QTimer()
    watch.timeout.connect(lambda: seen.extend(s.message() for s in visible_splashes()))
    watch.start(20)
    hardware = hardware_behind_splash(qapp)
    watch.stop()
    assert seen and seen[0] == MESSAGE  # shown while the bandwidth was measured
    assert hardware is not None and hardware.bandwidth_source == "measured"
    saved = json.loads((isolated_home.home / "hardware.json").read_text())
    assert saved["cpu_bandwidth_gbps"] == hardware.cpu_bandwidth_gbps > 0
    assert not visible_splashes()
    # whether that reading is kept for good depends on how busy the rest of the machine was
    # while it was taken (app.hardware.BandwidthReading.settled), which a test cannot choose:
    # the saved load is set here, both ways
    cache = isolated_home.home / "hardware.json"
    cache.write_text(json.dumps({**saved, "others_busy": 0.9}))
    assert hardware_behind_splash(qapp) is not None  # a busy reading: measured again
    cache.write_text(json.dumps({**json.loads(cache.read_text()), "others_busy": 0.0}))
    assert hardware_behind_splash(qapp) is None  # settled: no splash, no measuring


def test_a_broken_hardware_json_is_measured_again(qapp, isolated_home: Paths):
    isolated_home.home.mkdir(parents=True)
    (isolated_home.home / "hardware.json").write_text("[not the saved form")
    hardware = hardware_behind_splash(qapp)
    assert hardware is not None and hardware.bandwidth_source == "measured"
