"""Settings: generation, backend and hardware, presets, appearance, the tray and the login
start, remote servers, updates and MCP servers. (The local API server has its own page:
app.gui.server_page.)"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSystemTrayIcon,
    QVBoxLayout,
    QWidget,
)

from app.config import Paths
from app.gui.mcp_settings import McpSettingsBox
from app.gui.model_load_box import ModelLoadBox
from app.gui.presets_box import PresetsBox
from app.hardware import HardwareProfile
from app.preferences import THEMES, Settings
from app.runtime import endpoints
from app.runtime.backend_choice import choose_backend, llama_cpp_gpu_offload
from app.runtime.backend_table import NAMES as SELECTABLE
from app.runtime.backend_table import SPECULATIVE as SPECULATIVE_BACKENDS
from app.update_check import request_headers
from backends.errors import EmberError


class SettingsDialog(QDialog):
    remotes_changed = Signal()

    def __init__(self, settings: Settings, hardware: HardwareProfile, system_prompt: str,
                 installed: list[str], home: Paths | None = None, model: str | None = None) -> None:
        super().__init__()
        self.home = home
        self.setWindowTitle("Settings")
        self.settings = settings
        # the groups scroll, the Save and Cancel buttons stay in view
        outer = QVBoxLayout(self)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        body = QWidget()
        layout = QVBoxLayout(body)

        chat = QGroupBox("This conversation and new ones")
        form = QFormLayout(chat)
        self.system_prompt = QPlainTextEdit(system_prompt)
        self.system_prompt.setMaximumHeight(80)
        form.addRow("System prompt (this conversation)", self.system_prompt)
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.05,
                                          value=settings.temperature)
        form.addRow("Temperature", self.temperature)
        self.top_p = QDoubleSpinBox(minimum=0.01, maximum=1.0, singleStep=0.01,
                                    value=settings.top_p)
        form.addRow("Top p", self.top_p)
        self.max_tokens = QSpinBox(minimum=1, maximum=131072, value=settings.max_tokens)
        form.addRow("Max tokens", self.max_tokens)
        self.context = QSpinBox(minimum=0, maximum=1 << 20, singleStep=1024,
                                value=settings.context, specialValueText="automatic (fit model)")
        form.addRow("Context length", self.context)
        layout.addWidget(chat)

        engine = QGroupBox("Backend")
        form = QFormLayout(engine)
        choice = choose_backend(hardware)
        self.backend = QComboBox()
        self.backend.addItem(f"auto ({choice.name})", "auto")
        for name in SELECTABLE:
            self.backend.addItem(name, name)
        self.backend.setCurrentIndex(max(0, self.backend.findData(settings.backend)))
        form.addRow("Backend", self.backend)
        reason = QLabel(choice.reason)
        reason.setWordWrap(True)
        form.addRow("Why", reason)
        # any GPU llama.cpp offloads to: NVIDIA, AMD or Intel (Vulkan), Apple's (Metal)
        can_offload = bool(hardware.gpus) and llama_cpp_gpu_offload()
        self.gpu_layers = QSpinBox(minimum=-1, maximum=999, value=settings.gpu_layers,
                                   specialValueText="automatic (fit model)")
        self.gpu_layers.setEnabled(can_offload)
        self.gpu_layers.setToolTip(
            "llama.cpp's n_gpu_layers for every model; the load settings of the model in use "
            "(below) list each choice with its memory and speed" if can_offload else
            "no GPU offload here: " + choice.reason)
        form.addRow("GPU offload layers", self.gpu_layers)
        self.speculative = QCheckBox("Speculative decoding")
        self.speculative.setChecked(settings.speculative)
        self.draft_model = QComboBox()
        self.speculative.setToolTip(
            "Proposes several tokens and lets the model check them in one pass: faster, "
            "same answers. Prompt lookup copies from the conversation (best for editing "
            "code); a draft model is a smaller model of the same family.")
        self.draft_model.addItem("none: prompt lookup", "")
        for ref in installed:
            self.draft_model.addItem(ref, ref)
        self.draft_model.setCurrentIndex(max(0, self.draft_model.findData(settings.draft_model)))
        backend = choice.name if settings.backend == "auto" else settings.backend
        supported = backend in SPECULATIVE_BACKENDS
        for w in (self.speculative, self.draft_model):
            w.setEnabled(supported)
            if not supported:
                w.setToolTip(f"the {backend} backend does not do speculative decoding yet")
        form.addRow(self.speculative)
        form.addRow("Draft model", self.draft_model)
        layout.addWidget(engine)
        # the model in use, if local: its own load settings (app.presets.ModelLoad)
        self.model_load = ModelLoadBox(model, home, hardware, can_offload,
                                       settings.context) if model else None
        if self.model_load is not None:
            if not can_offload:
                self.model_load.gpu_layers.setToolTip(self.gpu_layers.toolTip())
            layout.addWidget(self.model_load)
        self.presets = PresetsBox(home)
        layout.addWidget(self.presets)

        look = QGroupBox("Appearance")
        form = QFormLayout(look)
        self.theme = QComboBox()
        self.theme.addItems(list(THEMES))
        self.theme.setCurrentText(settings.theme)
        form.addRow("Theme", self.theme)
        self.font_size = QSpinBox(minimum=7, maximum=32, value=settings.font_size)
        form.addRow("Font size", self.font_size)
        layout.addWidget(look)
        layout.addWidget(self._tray_box(settings))

        layout.addWidget(self._remotes_box())
        layout.addWidget(self._updates_box(settings))
        self.mcp = McpSettingsBox(home) if home is not None else None
        if self.mcp is not None:
            layout.addWidget(self.mcp)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        scroll.setWidget(body)
        outer.addWidget(scroll, 1)
        outer.addWidget(buttons)
        self.resize(body.sizeHint().width() + 40, min(body.sizeHint().height() + 80, 760))

    def _remotes_box(self) -> QGroupBox:
        """OpenAI-compatible servers (vLLM, SGLang, llama-server, another Ember): their models
        appear in the model picker as NAME/model."""
        box = QGroupBox("Remote servers")
        column = QVBoxLayout(box)
        self.remote_list = QListWidget()
        self.remote_list.setMaximumHeight(80)
        column.addWidget(self.remote_list)
        row = QHBoxLayout()
        self.remote_name = QLineEdit(placeholderText="name, e.g. lab")
        self.remote_url = QLineEdit(placeholderText="http://host:8000/v1")
        self.remote_key = QLineEdit(placeholderText="API key (optional)")
        self.remote_key.setEchoMode(QLineEdit.EchoMode.Password)
        add = self.add_button = QPushButton("Add")
        remove = QPushButton("Remove")
        for w in (self.remote_name, self.remote_url, self.remote_key, add, remove):
            row.addWidget(w)
        column.addLayout(row)
        self.remote_error = QLabel()
        self.remote_error.setObjectName("note")
        self.remote_error.setWordWrap(True)
        column.addWidget(self.remote_error)
        add.clicked.connect(self.add_remote)
        remove.clicked.connect(self.remove_remote)
        self._list_remotes()
        return box

    def _tray_box(self, settings: Settings) -> QGroupBox:
        box = QGroupBox("Tray and login")
        column = QVBoxLayout(box)
        self.keep_in_tray = QCheckBox("Keep Ember in the tray when the window closes")
        self.keep_in_tray.setChecked(settings.keep_in_tray)
        if QSystemTrayIcon.isSystemTrayAvailable():
            self.keep_in_tray.setToolTip("The server keeps serving and the models stay "
                                         "loaded; Quit in the tray icon's menu ends Ember")
        else:
            self.keep_in_tray.setToolTip("This desktop has no tray: closing the window "
                                         "ends Ember")
        column.addWidget(self.keep_in_tray)
        self.start_at_login = QCheckBox("Start Ember at login")
        self.start_at_login.setChecked(settings.start_at_login)
        self.start_at_login.setToolTip("In the tray, its window hidden (shown where the "
                                       "desktop has no tray)")
        column.addWidget(self.start_at_login)
        return box

    def _updates_box(self, settings: Settings) -> QGroupBox:
        box = QGroupBox("Updates")
        column = QVBoxLayout(box)
        self.update_check = QCheckBox("Check for a new version of Ember when it starts")
        self.update_check.setChecked(settings.update_check)
        column.addWidget(self.update_check)
        host = settings.update_feed.split("/")[2] if settings.update_feed.count("/") >= 2 \
            else settings.update_feed
        note = QLabel(f"One request to {host}, carrying only Ember's version "
                      f"(User-Agent: {request_headers()['User-Agent']}). The address is "
                      "update_feed in config.toml.")
        note.setWordWrap(True)
        column.addWidget(note)
        return box

    def _list_remotes(self) -> None:
        self.remote_list.clear()
        try:
            known = endpoints.endpoints(self.home)
        except EmberError as e:
            self.remote_error.setText(str(e))
            return
        for ep in known.values():
            item = QListWidgetItem(f"{ep.name} — {ep.url}" + (" (key set)" if ep.api_key else ""))
            item.setData(Qt.ItemDataRole.UserRole, ep.name)
            self.remote_list.addItem(item)

    def add_remote(self) -> None:
        try:
            endpoints.add(self.remote_name.text().strip(), self.remote_url.text().strip(),
                        self.remote_key.text().strip() or None, self.home)
        except EmberError as e:
            self.remote_error.setText(str(e))
            return
        self.remote_error.setText("")
        for w in (self.remote_name, self.remote_url, self.remote_key):
            w.clear()
        self._list_remotes()
        self.remotes_changed.emit()

    def remove_remote(self) -> None:
        item = self.remote_list.currentItem()
        if item is None:
            return
        try:
            endpoints.remove(item.data(Qt.ItemDataRole.UserRole), self.home)
        except EmberError as e:
            self.remote_error.setText(str(e))
            return
        self._list_remotes()
        self.remotes_changed.emit()

    def _save(self) -> None:
        # an edited mcp.json with a mistake keeps the dialog open, its error shown
        if self.mcp is not None and self.mcp.changed and not self.mcp.save():
            return
        self.accept()

    def result_settings(self) -> Settings:
        return replace(self.settings, temperature=round(self.temperature.value(), 3),
                       top_p=round(self.top_p.value(), 3), max_tokens=self.max_tokens.value(),
                       context=self.context.value(), backend=self.backend.currentData(),
                       gpu_layers=self.gpu_layers.value(),
                       speculative=self.speculative.isChecked(),
                       draft_model=self.draft_model.currentData() or "",
                       theme=self.theme.currentText(), font_size=self.font_size.value(),
                       update_check=self.update_check.isChecked(),
                       keep_in_tray=self.keep_in_tray.isChecked(),
                       start_at_login=self.start_at_login.isChecked())

    def result_system_prompt(self) -> str:
        return self.system_prompt.toPlainText()
