""""Your machine": what Ember found, the backend it picked and why, and the models that
suit this machine, each with its fit, memory breakdown and predicted speed."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.config import DEFAULT_MODEL, Paths
from app.fit import GB, Fit, recommend
from app.gpu_module.offer import offer_cuda_module, vulkan_runs_nvidia
from app.gui.catalog_page import BADGE_COLOR, speed_text
from app.gui.cuda_module_box import CudaModuleBox
from app.gui.quick_start import QuickStart
from app.hardware import HardwareProfile
from app.registry import ModelSpec, load_registry
from app.runtime.backend_choice import choose_backend

MIN_USEFUL_TOKENS_PER_S = 8.0  # slower than reading speed feels broken in a chat
RECOMMENDED_COUNT = 4


def machine_lines(hw: HardwareProfile) -> list[tuple[str, str]]:
    lines = [("CPU", f"{hw.cpu} · {hw.physical_cores} cores · {hw.bandwidth_text()}"),
             ("Memory", f"{hw.ram_total / GB:.1f} GB RAM, {hw.ram_available / GB:.1f} GB free")]
    if hw.apple_chip:
        lines.append(("Chip", f"Apple {hw.apple_chip}, unified memory"))
    for gpu in hw.gpus:
        if gpu.vendor == "apple":
            continue  # the chip's line says it
        memory = ("shares the system's memory" if gpu.shared_memory else
                  f"{gpu.vram_total / GB:.1f} GB VRAM ({gpu.vram_free / GB:.1f} GB free)")
        backend = f" · llama.cpp: {gpu.llama_backend}" if gpu.llama_backend else ""
        bandwidth = f" · {gpu.bandwidth_text()}" if gpu.bandwidth_gbps else ""
        lines.append(("GPU", f"{gpu.name} · {memory}{bandwidth}{backend}"))
    if not hw.gpus and not hw.apple_chip:
        lines.append(("GPU", "none found: models run on the CPU"))
    choice = choose_backend(hw)
    lines.append(("Backend", f"{choice.name}: {choice.reason}"))
    lines.extend(("Note", note) for note in hw.notes)
    return lines


def recommended_models(hw: HardwareProfile, count: int = RECOMMENDED_COUNT
                       ) -> list[tuple[ModelSpec, Fit]]:
    """Ember's default model first (small, fast, what `setup.sh` installs), then chat models
    that fit with the fit model's headroom and answer at a useful speed, largest first."""
    fitting = []
    for spec in load_registry().models:
        if not spec.chat or spec.embedding:
            continue
        fit = recommend(spec, hw)
        if fit is not None and fit.placement != "wont_fit":
            fitting.append((spec, fit))
    useful = [p for p in fitting if p[1].decode_tokens_per_s >= MIN_USEFUL_TOKENS_PER_S]
    if not useful:  # a slow machine still gets its fastest choices, labelled with their speed
        return sorted(fitting, key=lambda p: -p[1].decode_tokens_per_s)[:count]
    useful.sort(key=lambda p: (p[0].id != DEFAULT_MODEL, -p[0].params))
    return useful[:count]


class MachinePanel(QWidget):
    download_requested = Signal(str)  # MODEL:QUANT
    hub_requested = Signal()

    def __init__(self, hardware: HardwareProfile, installed: set[str],
                 chat_installed: bool = True, home: Paths | None = None) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        heading = QLabel("Your machine")
        heading.setObjectName("heading")
        layout.addWidget(heading)
        intro = QLabel("What Ember found, and the models that run well on it. Memory and "
                       "speed are the fit model's predictions for this machine.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        picks = recommended_models(hardware)
        self.quick_start: QuickStart | None = None
        if picks and not chat_installed:  # first run: one click to a working chat
            self.quick_start = QuickStart(*picks[0])
            layout.addWidget(self.quick_start)
        facts = QGridLayout()
        facts.setColumnStretch(1, 1)
        for row, (key, value) in enumerate(machine_lines(hardware)):
            facts.addWidget(QLabel(f"<b>{key}</b>"), row, 0)
            label = QLabel(value)
            label.setWordWrap(True)
            facts.addWidget(label, row, 1)
        layout.addLayout(facts)
        self.cuda_box: CudaModuleBox | None = None
        if home is not None and offer_cuda_module(hardware.gpus, home):
            self.cuda_box = CudaModuleBox(home, vulkan_runs_nvidia())
            layout.addWidget(self.cuda_box)
        heading = QLabel("Recommended for this machine")
        heading.setObjectName("heading")
        layout.addWidget(heading)
        self.buttons: dict[str, QPushButton] = {}
        if not picks:
            layout.addWidget(QLabel("No model in the registry runs at a useful speed here; "
                                    "see the Models page for all of them."))
        for spec, fit in picks:
            layout.addWidget(self._card(spec, fit, f"{spec.id}:{fit.quant}" in installed))
        more = QPushButton("All models…")
        more.clicked.connect(self.hub_requested)
        layout.addWidget(more)
        layout.addStretch(1)

    def _card(self, spec: ModelSpec, fit: Fit, installed: bool) -> QFrame:
        card = QFrame()
        card.setObjectName("card")
        grid = QGridLayout(card)
        grid.addWidget(QLabel(f"<b>{spec.name}</b> · {fit.quant}"), 0, 0)
        badge = QLabel(fit.label)
        badge.setStyleSheet(f"color: white; background: {BADGE_COLOR[fit.placement]}; "
                            "border-radius: 4px; padding: 1px 6px;")
        badge.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        grid.addWidget(badge, 0, 1)
        grid.addWidget(QLabel(speed_text(fit.decode_tokens_per_s)), 0, 2)
        memory = QLabel(f"{fit.memory.total / GB:.2f} GB = {fit.memory.describe(fit.context)}")
        memory.setWordWrap(True)
        grid.addWidget(memory, 1, 0, 1, 3)
        ref = f"{spec.id}:{fit.quant}"
        button = QPushButton("Installed" if installed else "Download")
        button.setEnabled(not installed)
        button.clicked.connect(lambda _=False: self.download_requested.emit(ref))
        self.buttons[ref] = button
        grid.addWidget(button, 0, 3, 2, 1)
        grid.setColumnStretch(0, 1)
        return card
