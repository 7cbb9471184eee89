"""Settings' load settings for the model in use (app.presets.ModelLoad): its context, KV cache
type and GPU layers, remembered for that model. The GPU layers list each choice with the GPU
memory and decode speed the fit model predicts, and marks the one the load plan makes."""

from __future__ import annotations

from typing import cast

from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QLabel, QSpinBox

from app.config import Paths
from app.fit.gpu_layer_choices import gpu_layer_choices
from app.gguf_file import GGUFInfo, read_gguf
from app.hardware import HardwareProfile
from app.presets import KV_CHOICES, ModelLoad, model_load, save_model_load
from app.store import Store
from backends.errors import EmberError

AS_ABOVE = "as in the settings above"
MIN_CONTEXT = 256  # app.presets.ModelLoad.validate's


class ModelLoadBox(QGroupBox):
    """The load settings remembered for one model (used whenever the window loads it).
    `hardware` and `can_offload` (llama.cpp finds a GPU here) give the GPU layers their
    choices; `app_context` is the context the settings above ask for (0: the plan's)."""

    def __init__(self, ref: str, home: Paths | None, hardware: HardwareProfile | None = None,
                 can_offload: bool = False, app_context: int = 0) -> None:
        super().__init__(f"Load settings for {ref} (remembered for this model)")
        self.ref, self.home = ref, home
        self.hardware, self.app_context = hardware, app_context
        form = QFormLayout(self)
        try:
            self.loaded, error = model_load(ref, home), ""
        except EmberError as e:
            self.loaded, error = ModelLoad(), str(e)
        self.gguf = self._gguf() if can_offload and hardware is not None else None
        self.context = QSpinBox(minimum=0, maximum=1 << 20, singleStep=1024,
                                value=self.loaded.context)
        self.context.setSpecialValueText(AS_ABOVE)
        form.addRow("Context length", self.context)
        self.gpu_layers = QComboBox()
        self.gpu_layers.setEnabled(can_offload)
        self.gpu_layers.setToolTip(
            "Layers of this model on the GPU, each with the GPU memory it takes and the "
            "decode speed the fit model predicts; the plan's choice is what loads when this "
            "is left as in the settings above (and they are automatic)")
        form.addRow("GPU offload layers", self.gpu_layers)
        self.kv_cache = QComboBox()
        for choice in KV_CHOICES:
            self.kv_cache.addItem({"auto": "automatic (fit model)"}.get(choice, choice), choice)
        self.kv_cache.setCurrentIndex(max(0, self.kv_cache.findData(self.loaded.kv_cache)))
        self.kv_cache.setToolTip("q8_0 halves the KV cache's memory, so a longer context fits "
                                 "(llama.cpp only)")
        form.addRow("KV cache type", self.kv_cache)
        self.error = QLabel(error)
        self.error.setObjectName("note")
        self.error.setWordWrap(True)
        self.error.setVisible(bool(error))
        form.addRow(self.error)
        self.list_gpu_layers()
        # each choice's memory and speed depend on the context and the KV cache type
        self.context.valueChanged.connect(self.list_gpu_layers)
        self.kv_cache.currentIndexChanged.connect(self.list_gpu_layers)

    def _gguf(self) -> GGUFInfo | None:
        """The model's GGUF header, if it is a GGUF file that reads (a model that does not
        gets no choices here; loading it says what is wrong)."""
        try:
            model = Store(self.home).get(self.ref)
            return read_gguf(model.path) if model.format == "gguf" else None
        except (EmberError, OSError):
            return None

    def list_gpu_layers(self) -> None:
        """(Re)fill the GPU layers' choices for the context and KV cache now set, keeping the
        one selected. Choices the fit model says will not fit cannot be picked."""
        keep = self.gpu_layers.currentData() if self.gpu_layers.count() else \
            self.loaded.gpu_layers
        self.gpu_layers.clear()
        self.gpu_layers.addItem(AS_ABOVE, -1)
        if self.gguf is not None and self.hardware is not None:
            context = self.context.value() or self.app_context
            kv = self.kv_cache.currentData()
            items = cast(QStandardItemModel, self.gpu_layers.model())
            for choice in gpu_layer_choices(self.gguf, self.hardware,
                                            context if context >= MIN_CONTEXT else None,
                                            None if kv == "auto" else kv):
                self.gpu_layers.addItem(choice.label, choice.value)
                item = items.item(self.gpu_layers.count() - 1)
                item.setEnabled(choice.fits or choice.value == keep)
        if self.gpu_layers.findData(keep) < 0:  # a count saved before, or set in config.toml
            self.gpu_layers.addItem(f"{keep} (llama.cpp's n_gpu_layers, saved)", keep)
        self.gpu_layers.setCurrentIndex(self.gpu_layers.findData(keep))

    def value(self) -> ModelLoad:
        return ModelLoad(self.context.value(), self.gpu_layers.currentData(),
                         self.kv_cache.currentData())

    def save(self) -> bool:
        """Remember the settings; whether they changed (then the model must load anew)."""
        value = self.value()
        if value == self.loaded:
            return False
        save_model_load(self.ref, value, self.home)
        self.loaded = value
        return True
