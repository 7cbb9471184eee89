"""The status bar's right side: the loaded model, the memory its worker holds (resident set,
as the server's /metrics reports it) and the last answer's decode speed.

The Runtime is asked off the UI thread (StatusProbeTask), every PROBE_MS: a model loading
elsewhere (the API server) holds the Runtime's lock for as long as the load takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

from app.gui.thread_task import ThreadTask
from app.runtime import Runtime
from app.runtime.worker_memory import resident_bytes

PROBE_MS = 2000


@dataclass(frozen=True)
class LoadedNow:
    ref: str
    backend: str
    context: int
    resident_bytes: int
    planned_bytes: int = 0  # the load plan's (LoadPlan.memory_bytes): the tray shows it


class StatusProbeTask(ThreadTask):
    thread_name = "ember-gui-status"
    probed = Signal(list)  # [LoadedNow]

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime

    def _run(self) -> None:
        # a model the Ember service runs has no worker here: its load plan's memory
        self.probed.emit([LoadedNow(lm.model.ref, lm.backend, lm.plan.context,
                                    resident_bytes(lm.pid) or lm.plan.memory_bytes,
                                    lm.plan.memory_bytes)
                          for lm in self.runtime.loaded()])


def memory_text(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


class StatusLine(QWidget):
    loaded_seen = Signal(list)  # [LoadedNow], after each probe

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 6, 0)
        row.setSpacing(14)
        self.model = QLabel("No model loaded")
        self.model.setObjectName("status-model")
        self.memory = QLabel()
        self.memory.setToolTip("Memory the model's worker process holds (resident set)")
        self.speed = QLabel()
        self.speed.setToolTip("Decode speed of the last answer")
        for label in (self.model, self.memory, self.speed):
            row.addWidget(label)
        self._probe: StatusProbeTask | None = None
        self.timer = QTimer(self, interval=PROBE_MS)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()
        self.refresh()

    def refresh(self) -> None:
        if self._probe is not None:  # the last one has not answered: a load holds the lock
            return
        self._probe = StatusProbeTask(self.runtime)
        self._probe.probed.connect(self._show_loaded)
        self._probe.start()

    def _show_loaded(self, loaded: list[LoadedNow]) -> None:
        self._probe = None
        if not loaded:
            self.model.setText("No model loaded")
            self.memory.setText("")
        else:
            self.model.setText("Loaded: " + ", ".join(f"{m.ref} ({m.backend})" for m in loaded))
            self.memory.setText("Memory: " + memory_text(sum(m.resident_bytes for m in loaded)))
        self.memory.setVisible(bool(loaded))
        self.loaded_seen.emit(loaded)

    def show_stats(self, stats: dict | None) -> None:
        speed = (stats or {}).get("decode_tokens_per_s")
        self.speed.setText(f"Last answer: {speed:.1f} tokens/s" if speed else "")
        self.speed.setVisible(bool(speed))

    def stop(self) -> None:
        self.timer.stop()
