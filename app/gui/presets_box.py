"""Settings' presets (app.presets), and the tool bar's preset picker for the conversation."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
)

from app.config import Paths
from app.presets import (
    Preset,
    delete_preset,
    presets,
    save_preset,
)
from backends.errors import EmberError

NO_PRESET = "No preset (Settings)"


class PresetPicker(QComboBox):
    """The open conversation's preset; picking one applies it to this chat and new ones."""
    picked = Signal(object)  # a preset name, or None

    def __init__(self, home: Paths | None) -> None:
        super().__init__()
        self.home = home
        self.setObjectName("preset-picker")
        self.setToolTip("The conversation's preset: its system prompt and sampling settings "
                        "(make them in Settings)")
        self.setMinimumWidth(180)
        self.activated.connect(lambda i: self.picked.emit(self.itemData(i)))
        self.refresh()

    def refresh(self) -> None:
        current = self.currentData()
        self.blockSignals(True)
        self.clear()
        self.addItem(NO_PRESET, None)
        try:
            names = list(presets(self.home))
        except EmberError as e:  # a broken config.toml: no presets until it is fixed
            names = []
            self.setToolTip(str(e))
        for name in names:
            self.addItem(name, name)
        self.setCurrentIndex(max(0, self.findData(current)))
        self.blockSignals(False)

    def show_preset(self, name: str | None) -> None:
        """Show the conversation's preset (one that no longer exists shows as none)."""
        self.blockSignals(True)
        self.setCurrentIndex(max(0, self.findData(name)) if name is not None else 0)
        self.blockSignals(False)


class PresetsBox(QGroupBox):
    """Make, change and delete presets; each change is saved to config.toml at once."""
    changed = Signal()

    def __init__(self, home: Paths | None) -> None:
        super().__init__("Presets (system prompt and sampling, chosen per conversation)")
        self.home = home
        column = QVBoxLayout(self)
        row = QHBoxLayout()
        self.list = QListWidget()
        self.list.setMaximumWidth(180)
        self.list.setMaximumHeight(170)
        row.addWidget(self.list)
        form = QFormLayout()
        defaults = Preset("x")
        self.name = QLineEdit(placeholderText="e.g. Code reviewer")
        form.addRow("Name", self.name)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setMaximumHeight(60)
        form.addRow("System prompt", self.system_prompt)
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.05,
                                          value=defaults.temperature)
        self.top_p = QDoubleSpinBox(minimum=0.01, maximum=1.0, singleStep=0.01,
                                    value=defaults.top_p)
        self.top_k = QSpinBox(minimum=0, maximum=1000, value=defaults.top_k)
        self.min_p = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.01,
                                    value=defaults.min_p)
        self.repeat_penalty = QDoubleSpinBox(minimum=0.01, maximum=10.0, singleStep=0.05,
                                             value=defaults.repeat_penalty)
        self.max_tokens = QSpinBox(minimum=1, maximum=131072, value=defaults.max_tokens)
        numbers = QHBoxLayout()
        for label, w in (("temp", self.temperature), ("top p", self.top_p),
                         ("top k", self.top_k), ("min p", self.min_p),
                         ("repeat", self.repeat_penalty), ("max tokens", self.max_tokens)):
            numbers.addWidget(QLabel(label))
            numbers.addWidget(w)
        form.addRow("Sampling", numbers)
        row.addLayout(form, 1)
        column.addLayout(row)
        buttons = QHBoxLayout()
        self.new_button = QPushButton("New")
        self.save_button = QPushButton("Save preset")
        self.delete_button = QPushButton("Delete preset")
        for b in (self.new_button, self.save_button, self.delete_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        column.addLayout(buttons)
        self.error = QLabel()
        self.error.setObjectName("note")
        self.error.setWordWrap(True)
        column.addWidget(self.error)
        self.list.currentItemChanged.connect(self._selected)
        self.new_button.clicked.connect(self.new)
        self.save_button.clicked.connect(self.save)
        self.delete_button.clicked.connect(self.delete)
        self._list()

    def _list(self, select: str | None = None) -> None:
        self.list.clear()
        try:
            known = presets(self.home)
        except EmberError as e:
            self.error.setText(str(e))
            return
        for name in known:
            item = QListWidgetItem(name)
            item.setData(Qt.ItemDataRole.UserRole, name)
            self.list.addItem(item)
            if name == select:
                self.list.setCurrentItem(item)

    def selected(self) -> str | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else None

    def _selected(self, item: QListWidgetItem | None, _previous: object) -> None:
        if item is None:
            return
        try:
            preset = presets(self.home)[item.data(Qt.ItemDataRole.UserRole)]
        except (EmberError, KeyError):
            return
        self.fill(preset)

    def fill(self, preset: Preset) -> None:
        self.name.setText(preset.name)
        self.system_prompt.setPlainText(preset.system_prompt)
        self.temperature.setValue(preset.temperature)
        self.top_p.setValue(preset.top_p)
        self.top_k.setValue(preset.top_k)
        self.min_p.setValue(preset.min_p)
        self.repeat_penalty.setValue(preset.repeat_penalty)
        self.max_tokens.setValue(preset.max_tokens)

    def new(self) -> None:
        self.list.setCurrentRow(-1)
        self.fill(Preset(""))
        self.name.setFocus()

    def preset(self) -> Preset:
        return Preset(self.name.text().strip(), self.system_prompt.toPlainText(),
                      round(self.temperature.value(), 3), round(self.top_p.value(), 3),
                      self.top_k.value(), round(self.min_p.value(), 3),
                      round(self.repeat_penalty.value(), 3), self.max_tokens.value())

    def save(self) -> None:
        preset = self.preset()
        try:
            save_preset(preset, self.home, replaces=self.selected())
        except EmberError as e:
            self.error.setText(str(e))
            return
        self.error.setText("")
        self._list(select=preset.name)
        self.changed.emit()

    def delete(self) -> None:
        name = self.selected()
        if name is None:
            return
        try:
            delete_preset(name, self.home)
        except EmberError as e:
            self.error.setText(str(e))
            return
        self._list()
        self.new()
        self.changed.emit()
