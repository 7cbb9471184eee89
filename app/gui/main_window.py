"""Ember's main window: the rail of pages on the left (Chat, Models, Machine, Server, and
Settings, a dialog); the model picker (with each model's fit) and the preset in the tool bar;
the loaded model, its memory and the last answer's speed in the status bar. Every shortcut
is in app.gui.shortcuts (F1 lists them).

Settings stays a dialog opened from the rail: its edits count only on Save (Cancel leaves
everything as it was), which a page that is always open could not offer."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QSystemTrayIcon,
    QToolBar,
    QWidget,
)

from app.autostart import set_start_at_login
from app.chat.tools import ChatTools
from app.config import Paths
from app.export import ImportFormatError, import_file
from app.gui import shortcuts
from app.gui.catalog_page import HubWidget
from app.gui.chat_controller import ChatController
from app.gui.chat_view import ChatView
from app.gui.conversations import ConversationList
from app.gui.export_dialog import ExportDialog, import_file_dialog
from app.gui.icons import badge_icon
from app.gui.machine import MachinePanel
from app.gui.model_choices import ModelChoice, local_choice, remote_choice
from app.gui.model_switcher import ModelSwitcher
from app.gui.nav_rail import PAGES, NavRail
from app.gui.presets_box import PresetPicker
from app.gui.server_page import ServerPage
from app.gui.settings_dialog import SettingsDialog
from app.gui.shortcuts import ShortcutsDialog
from app.gui.status_line import StatusLine
from app.gui.tasks import RemoteModelsTask, ServerTask
from app.gui.theme import apply_theme
from app.gui.tray import ServerState, TrayIcon
from app.gui.update_notice import UpdateNotice
from app.history import History
from app.identity import APP_NAME, ICON_SVG
from app.preferences import Settings, save_settings
from app.presets import load_options
from app.runtime import Runtime
from app.runtime.choose import describe
from app.store import InstalledModel
from backends.errors import EmberError

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    def __init__(self, runtime: Runtime, history: History, settings: Settings,
                 home: Paths, settings_error: str = "", library=None) -> None:
        super().__init__()
        self.runtime, self.history, self.settings, self.home = runtime, history, settings, home
        self.library = library  # app.documents.library.DocumentLibrary: the chats' documents
        self.settings_error = settings_error  # a broken config.toml is never overwritten
        self.server: ServerTask | None = None
        self.server_text, self.server_url, self.server_key = "stopped", "", ""
        self.setWindowTitle("Ember")
        self.resize(1180, 760)

        self.conversations = ConversationList(history)
        self.chat = ChatView(dark=settings.theme == "dark")
        self.chat_tools = ChatTools(home)  # MCP servers of mcp.json, closed with the window
        self.controller = ChatController(self.chat, history, runtime, settings, home,
                                         self.chat_tools, library)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.chat)
        self.machine_page = QScrollArea()
        self.machine_page.setWidgetResizable(True)
        self.pages.addWidget(self.machine_page)
        self.hub = HubWidget(runtime.store, runtime.hardware)
        self.pages.addWidget(self.hub)
        self.server_page = ServerPage()
        self.pages.addWidget(self.server_page)
        self.rail = NavRail()
        self.rail.paint_icons()
        split = QSplitter()
        split.addWidget(self.conversations)  # shown with the Chat page only
        split.addWidget(self.pages)
        split.setStretchFactor(1, 1)
        split.setSizes([250, 850])
        body = QWidget()
        row = QHBoxLayout(body)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        row.addWidget(self.rail)
        row.addWidget(split, 1)
        self.setCentralWidget(body)

        bar = QToolBar("Main")
        bar.setMovable(False)
        self.addToolBar(bar)
        bar.addWidget(QLabel(" Model: "))
        self.model_picker = QComboBox()
        self.model_picker.setMinimumWidth(360)
        self.model_picker.setToolTip("The model of this chat, with its fit on this machine "
                                     f"(switch with {shortcuts.MODEL_SWITCHER.keys})")
        bar.addWidget(self.model_picker)
        bar.addWidget(QLabel("  Preset: "))
        self.preset_picker = PresetPicker(home)
        bar.addWidget(self.preset_picker)
        self.actions_by_name: dict[str, QAction] = {}
        for name, slot, key in (("Export…", self.export_current, shortcuts.EXPORT),
                                ("Import…", self.import_file, shortcuts.IMPORT)):
            action = bar.addAction(name)
            action.triggered.connect(slot)
            action.setToolTip(f"{key.what} ({key.keys})")
            self.actions_by_name[name] = action
        self.status_line = StatusLine(runtime)
        self.statusBar().addPermanentWidget(self.status_line)
        self.update_notice = UpdateNotice()
        self.statusBar().addPermanentWidget(self.update_notice)
        self.server_label = QLabel()
        self.statusBar().addPermanentWidget(self.server_label)
        self.controller.stats_shown.connect(self.status_line.show_stats)
        self.controller.status_message.connect(self._status_message)
        self.controller.embedding_model_wanted.connect(self._download_from_machine_page)
        self.controller.busy_changed.connect(lambda _busy: self.status_line.refresh())

        self._bind_shortcuts()
        self.rail.page_requested.connect(self.show_page)
        self.rail.settings_requested.connect(self.open_settings)
        self.rail.shortcuts_requested.connect(self.show_shortcuts)
        self.server_page.toggle_requested.connect(self.toggle_server)
        self.switcher: ModelSwitcher | None = None
        self.shortcuts_dialog: ShortcutsDialog | None = None
        self.choices: list[ModelChoice] = []  # what the picker lists, in its order
        self.export_dialog: ExportDialog | None = None
        self.import_dialog: QFileDialog | None = None
        self.preset_picker.picked.connect(self.controller.choices.set_preset)
        self.controller.preset_shown.connect(self.preset_picker.show_preset)
        self.conversations.new_requested.connect(self.new_chat)
        self.conversations.selected.connect(self._open_conversation)
        self.conversations.deleted.connect(self._deleted)
        self.controller.conversation_changed.connect(self.conversations.refresh)
        self.controller.busy_changed.connect(self._busy)
        self.failed_model: str | None = None
        self.controller.model_failed.connect(self._model_failed)
        self.chat.banner_action.connect(self._banner_action)
        self.controller.model_wanted.connect(self.choose_model)
        self.model_picker.currentIndexChanged.connect(self._model_picked)
        self.hub.installed.connect(self._installed)

        self.remote_models: list = []
        self.remote_failures: dict[str, str] = {}
        self.quick_ref: str | None = None  # the first-run download, to open a chat on
        # the tray icon, where the desktop has a tray; without one, nothing of it exists
        self.tray: TrayIcon | None = None
        self.quitting = False  # Quit asked for: a close then ends Ember, tray or not
        self.told_in_tray = False
        if QSystemTrayIcon.isSystemTrayAvailable():
            self.add_tray()
        if settings.start_at_login:
            self._renew_login_entry()
        self._show_where()
        self.refresh_models()
        self.refresh_remote_models()
        self._build_machine_page()
        self.conversations.refresh()
        existing = history.conversations()
        if not self.runtime.store.list():
            self.show_machine()  # first run: what this machine can do, and what to get
        else:
            if existing:
                self.conversations.refresh(select=existing[0].id)
                self.controller.open(existing[0].id)
            self.show_chat()
        if history.interrupted_on_open:
            self.statusBar().showMessage(f"{history.interrupted_on_open} answer(s) were cut off "
                                         "when Ember last stopped; they are kept, marked "
                                         "interrupted.", 15000)
        if settings.update_check:  # off unless switched on: the user decides what is sent
            self.update_notice.check(settings.update_feed)
        if history.recovered_from:
            QMessageBox.warning(self, "Ember", f"The history file could not be read; it was "
                                f"kept as {history.recovered_from} and a new one started.")

    # pages and shortcuts

    def _bind_shortcuts(self) -> None:
        keys = shortcuts
        for key, slot in ((keys.MODEL_SWITCHER, self.open_model_switcher),
                          (keys.NEW_CHAT, self.new_chat), (keys.FIND, self.find_in_chat),
                          (keys.EXPORT, self.export_current), (keys.IMPORT, self.import_file),
                          (keys.OPEN_SETTINGS, self.open_settings),
                          (keys.HELP, self.show_shortcuts)):
            QShortcut(QKeySequence(key.keys), self, activated=slot)
        for item in PAGES:
            QShortcut(QKeySequence(item.shortcut), self,
                      activated=lambda name=item.name: self.show_page(name))
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=self._escape)

    def _escape(self) -> None:
        """Esc closes the find bar when it has the keyboard, else stops the answer."""
        bar = self.chat.find_bar
        if bar.isVisible() and bar.isAncestorOf(QApplication.focusWidget()):
            bar.close_bar()
            self.chat.composer.setFocus()
        else:
            self.controller.stop()

    def show_page(self, name: str) -> None:
        {"chat": self.show_chat, "models": self.show_hub, "machine": self.show_machine,
         "server": self.show_server}[name]()

    def _page_shown(self, name: str) -> None:
        self.rail.set_current(name)
        self.conversations.setVisible(name == "chat")

    def show_chat(self) -> None:
        self.pages.setCurrentWidget(self.chat)
        self._page_shown("chat")
        self.chat.composer.setFocus()

    def show_machine(self) -> None:
        self.pages.setCurrentWidget(self.machine_page)
        self._page_shown("machine")

    def show_hub(self, spec_id: str | None = None) -> None:
        if isinstance(spec_id, str):
            self.hub.expand(spec_id)
        self.pages.setCurrentWidget(self.hub)
        self._page_shown("models")

    def show_server(self) -> None:
        self.server_page.set_model(self.controller.model)
        self.pages.setCurrentWidget(self.server_page)
        self._page_shown("server")

    def find_in_chat(self) -> None:
        """Ctrl+F: the find bar over the shown conversation."""
        self.show_chat()
        self.chat.find_bar.open_bar()

    def show_shortcuts(self) -> None:
        self.shortcuts_dialog = ShortcutsDialog(self)
        self.shortcuts_dialog.open()

    def open_model_switcher(self) -> None:
        """Ctrl+K: type to filter the models, Enter picks one for this chat."""
        if not self.model_picker.isEnabled():
            self.statusBar().showMessage("The model can change once this answer ends "
                                         "(Esc stops it)", 5000)
            return
        self.switcher = ModelSwitcher(self.choices, self.controller.model, self)
        self.switcher.chosen.connect(self.choose_model)
        self.switcher.popup()

    def choose_model(self, ref: str) -> None:
        index = self.model_picker.findData(ref)
        if index >= 0:
            self.model_picker.setCurrentIndex(index)

    def _build_machine_page(self) -> None:
        models = self.runtime.store.list()
        panel = MachinePanel(self.runtime.hardware, {m.ref for m in models},
                             chat_installed=any(m.chat for m in models),
                             home=self.runtime.store.paths)
        panel.download_requested.connect(self._download_from_machine_page)
        panel.hub_requested.connect(self.show_hub)
        if panel.quick_start is not None:
            panel.quick_start.requested.connect(self.quick_start)
        self.machine_panel = panel
        self.machine_page.setWidget(panel)

    def quick_start(self, ref: str) -> None:
        """Download `ref` with its progress on this page, then open a chat on it."""
        self.quick_ref = ref
        row = self.hub.download(ref)
        if self.machine_panel.quick_start is not None:
            self.machine_panel.quick_start.follow(row)

    def _download_from_machine_page(self, ref: str) -> None:
        self.hub.download(ref)
        self.show_hub()

    # models

    def _backend_of(self, model: InstalledModel) -> tuple[str, str]:
        """The backend that runs `model` here, and why."""
        requested = None if self.settings.backend == "auto" else self.settings.backend
        try:
            choice = self.runtime.choose(model, requested)
            return choice.name, choice.reason
        except EmberError as e:  # e.g. a bad backend for this model in config.toml
            return f"error: {e}", ""

    def refresh_remote_models(self) -> None:
        """Ask the remote endpoints for their models; the picker lists them when they answer."""
        task = RemoteModelsTask(self.runtime)
        task.listed.connect(self._remote_models_listed)
        self._remote_task = task
        task.start()

    def _remote_models_listed(self, found: list, failed: dict) -> None:
        self.remote_models = found
        self.remote_failures = failed
        self.refresh_models()
        if failed:
            self.statusBar().showMessage("Remote servers not reachable: " + "; ".join(
                f"{name}: {why}" for name, why in failed.items()), 15000)

    def refresh_models(self, select: str | None = None) -> None:
        current = select or self.controller.model or self.settings.default_model
        self.model_picker.blockSignals(True)
        self.model_picker.clear()
        hardware = self.runtime.hardware
        self.choices = []
        for m in self.runtime.store.list():
            if m.chat:
                context, gpu_layers, _kv = load_options(
                    m.ref, self.settings.context, self.settings.gpu_layers, self.home)
                self.choices.append(local_choice(m, *self._backend_of(m), hardware=hardware,
                                                 context=context, n_gpu_layers=gpu_layers))
        self.choices += [remote_choice(rm.ref) for rm in self.remote_models]
        for i, choice in enumerate(self.choices):
            self.model_picker.addItem(choice.text, choice.ref)
            if choice.color:
                self.model_picker.setItemIcon(i, badge_icon(choice.color))
            self.model_picker.setItemData(i, choice.detail, Qt.ItemDataRole.ToolTipRole)
        index = self.model_picker.findData(current)
        if index < 0:
            index = next((i for i in range(self.model_picker.count())
                          if str(self.model_picker.itemData(i)).startswith(current + ":")), 0)
        self.model_picker.setCurrentIndex(index)
        self.model_picker.setPlaceholderText("no model installed: see the Machine page")
        self.model_picker.blockSignals(False)
        if self.model_picker.currentData() is not None:
            self.controller.model = self.model_picker.currentData()

    def _model_picked(self, _index: int) -> None:
        self.controller.model = self.model_picker.currentData()
        if self.controller.conversation_id is not None:
            self.history.set_model(self.controller.conversation_id, self.controller.model)

    def _installed(self, model: InstalledModel) -> None:
        """A verified download is ready: select it and go chat."""
        self.refresh_models(select=model.ref)
        self._build_machine_page()
        if model.chat:
            self.statusBar().showMessage(f"{model.ref} is installed and verified: ready to chat",
                                         10000)
            # first run, or the Start here button: straight to a chat on the new model
            if model.ref == self.quick_ref or not self.history.conversations():
                self.quick_ref = None
                self.new_chat()

    def _banner_action(self, action: str) -> None:
        model = self.failed_model or self.controller.model
        if action == "Pick a smaller quantization" and model:
            self.show_hub(model.split(":")[0])  # the same model's other quantizations

    def _model_failed(self, model: str, _message: str) -> None:
        self.failed_model = model

    # conversations

    def use_runtime(self, runtime: Runtime) -> None:
        """Models run on `runtime` from now on (everything that asks one is told)."""
        self.runtime = runtime
        self.controller.runtime = self.controller.choices.runtime = runtime
        self.status_line.runtime = runtime
        self._show_where()

    def _show_where(self) -> None:
        """The Server page and the status bar say whose API serves: a window that joined the
        Ember service shows the service's address and key (its API is running, and it has the
        models this window uses); otherwise this window's own server, stopped until started."""
        from app.runtime.service_runtime import ServiceRuntime

        runtime = self.runtime
        if isinstance(runtime, ServiceRuntime):
            self.server_text = f"the Ember service at {runtime.url}"
            self.server_label.setText(f"API server: the Ember service at {runtime.url}")
            self.server_page.show_state(self.server_text, False, runtime.url, runtime.api_key)
            if self.tray is not None:
                self.tray.show_server(ServerState(True, self.server_text, runtime.url, True))
        elif self.server is None:
            self._server_state("stopped")
        self.server_page.show_where(describe(runtime), runtime.is_service)

    def leave_a_gone_service(self) -> bool:
        """At a new chat: when the service this window joined no longer answers, run models
        in this process from now on, and say so. (A request while it restarts fails with
        its message and the next one reconnects: only a new chat gives up on it.)"""
        from app.runtime.service_runtime import ServiceRuntime

        rt = self.runtime
        if not isinstance(rt, ServiceRuntime) or rt.answers():
            return False
        self.use_runtime(rt.in_process())
        rt.shutdown()
        self.statusBar().showMessage(f"The Ember service at {rt.url} does not answer: models "
                                     "now run in this window.", 30000)
        return True

    def new_chat(self) -> None:
        self.leave_a_gone_service()
        conv_id = self.controller.new_conversation()
        self.conversations.refresh(select=conv_id)
        self.show_chat()

    def _open_conversation(self, conv_id: int) -> None:
        self.controller.open(conv_id)
        model = self.history.get(conv_id).model
        if model and self.model_picker.findData(model) >= 0:
            self.model_picker.setCurrentIndex(self.model_picker.findData(model))
        self.show_chat()

    def _deleted(self, conv_id: int) -> None:
        if self.controller.conversation_id == conv_id:
            self.controller.stop(wait=True)
            self.controller.conversation_id = None
            self.chat.clear()
            self.chat.title.setText("")
            if self.controller.documents is not None:
                self.controller.documents.show(None)

    def _status_message(self, text: str) -> None:
        """Progress of the chat's documents (reading, embedding); "" clears it."""
        if text:
            self.statusBar().showMessage(text, 15000)
        else:
            self.statusBar().clearMessage()

    # export and import

    def export_current(self) -> None:
        """Ctrl+E: the export dialog, on this conversation (or all of them)."""
        dialog = ExportDialog(self.history, self.controller.conversation_id, Path.home(), self)
        dialog.accepted.connect(lambda: self.statusBar().showMessage(
            f"Exported to {dialog.written}", 10000))
        self.export_dialog = dialog
        dialog.open()

    def import_file(self) -> None:
        self.import_dialog = import_file_dialog(self, Path.home())
        self.import_dialog.fileSelected.connect(self.import_from)

    def import_from(self, path: str) -> list[int]:
        """Add the conversations of an export file and open the first; a bad file changes
        nothing and says why."""
        try:
            ids = import_file(self.history, Path(path))
        except ImportFormatError as e:
            self.import_error = QMessageBox(QMessageBox.Icon.Warning, "Import",
                                            f"Nothing was imported: {e}", parent=self)
            self.import_error.open()
            return []
        self.conversations.refresh(select=ids[0] if ids else None)
        if ids:
            self._open_conversation(ids[0])
        self.statusBar().showMessage(f"Imported {len(ids)} conversation(s) from {path}", 10000)
        return ids

    def _busy(self, busy: bool) -> None:
        self.model_picker.setEnabled(not busy)

    # settings and server

    def open_settings(self) -> None:
        conv_id = self.controller.conversation_id
        system = self.history.get(conv_id).system_prompt if conv_id else \
            self.settings.system_prompt
        installed = [m.ref for m in self.runtime.store.list()]
        model = self.controller.model
        local = model if model and not self.runtime.is_remote(model) else None
        dialog = SettingsDialog(self.settings, self.runtime.hardware, system, installed,
                                home=self.home, model=local)
        dialog.presets.changed.connect(self.preset_picker.refresh)
        dialog.remotes_changed.connect(self.refresh_remote_models)
        self.settings_dialog = dialog
        if dialog.exec():
            self.apply_settings(dialog.result_settings(), dialog.result_system_prompt())
            self.apply_model_load(dialog)
        self.settings_dialog = None

    def apply_settings(self, settings: Settings, system_prompt: str) -> None:
        try:
            settings.validate()
        except EmberError as e:
            QMessageBox.warning(self, "Settings", str(e))
            return
        old_load = (self.settings.context, self.settings.gpu_layers, self.settings.backend)
        check_now = settings.update_check and not self.settings.update_check
        if settings.start_at_login != self.settings.start_at_login:
            try:
                set_start_at_login(settings.start_at_login)
            except OSError as e:
                QMessageBox.warning(self, "Settings", f"Ember could not "
                                    f"{'add' if settings.start_at_login else 'remove'} its "
                                    f"login entry: {e}")
                settings.start_at_login = self.settings.start_at_login
        for name, value in vars(settings).items():
            setattr(self.settings, name, value)
        if self.controller.conversation_id is not None:
            self.history.set_system_prompt(self.controller.conversation_id, system_prompt)
        else:
            self.settings.system_prompt = system_prompt
        app = QApplication.instance()
        if app is not None:
            apply_theme(app, self.settings.theme, self.settings.font_size)
        self.chat.dark = self.settings.theme == "dark"
        if self.controller.conversation_id is not None:
            self.controller.open(self.controller.conversation_id)  # re-render in the theme
        new_load = (self.settings.context, self.settings.gpu_layers, self.settings.backend)
        if old_load != new_load and self.controller.model and \
                not self.runtime.is_remote(self.controller.model):
            self.runtime.unload(self.controller.model)  # the next answer loads it anew
        if old_load != new_load:
            self.refresh_models()  # the badges: each model's fit with the new settings
        if check_now:  # just switched on: show at once that it works
            self.update_notice.check(self.settings.update_feed)
        if self.settings_error:
            QMessageBox.warning(self, "Settings", "Not saved: config.toml could not be read "
                                f"({self.settings_error}). Fix it, then save again.")
            return
        save_settings(self.settings, self.home)

    def apply_model_load(self, dialog: SettingsDialog) -> None:
        """Remember the model's own load settings; changed, it loads anew for the next answer."""
        box = dialog.model_load
        if box is None or self.settings_error:
            return
        try:
            changed = box.save()
        except EmberError as e:
            QMessageBox.warning(self, "Settings", str(e))
            return
        if changed:
            self.runtime.unload(box.ref)
            self.refresh_models()  # the picker's badge: the fit with the model's new settings

    def toggle_server(self) -> None:
        if self.server is None and self.runtime.is_service:
            return  # the service serves the API already, with the models this window uses
        if self.server is not None:
            self.server.stop()
            self.server = None
            self._server_state("stopped")
            return
        self.server = ServerTask(self.runtime)
        self.server.started.connect(lambda url, key: self._server_state(
            f"{url}  (OpenAI: {url}/v1, Ollama: {url}/api)  key: {key}", url, key))
        self.server.stopped.connect(self._server_stopped)
        self._server_state("starting…")
        self.server.start()

    def _server_stopped(self, why: str) -> None:
        if why:
            self.server = None
            self._server_state(f"stopped: {why}")

    def _server_state(self, text: str, url: str = "", key: str = "") -> None:
        self.server_text, self.server_url, self.server_key = text, url, key
        # the key stays on the Server page (behind Show), not in the status bar
        self.server_label.setText("API server: " + (url or text))
        self.server_page.show_state(text, self.server is not None, url, key)
        if self.tray is not None:
            self.tray.show_server(ServerState(self.server is not None, text, url))

    # the tray

    def make_tray(self) -> TrayIcon:
        """The tray icon, wired to the window (made by __init__ where there is a tray)."""
        tray = TrayIcon(QIcon(str(ICON_SVG)), self)
        tray.open_requested.connect(self.open_from_tray)
        tray.server_toggle_requested.connect(self.toggle_server)
        tray.unload_requested.connect(self.unload_model)
        tray.quit_requested.connect(self.quit_app)
        self.status_line.loaded_seen.connect(tray.models_seen)
        tray.menu.aboutToShow.connect(self.status_line.refresh)  # fresh, in a moment
        return tray

    def add_tray(self) -> TrayIcon:
        """Show the tray icon (made by __init__ where there is a tray, or later by
        app.gui.start when the tray comes up after Ember)."""
        self.tray = self.make_tray()
        self.tray.show()
        if self.server is None and self.runtime.is_service:
            self._show_where()
        else:
            self._server_state(self.server_text, self.server_url, self.server_key)
        self.status_line.refresh()  # its models, at once
        return self.tray

    def _renew_login_entry(self) -> None:
        """Write the login entry again: it names this install's path, which an update or a
        move changes (an AppImage's file, a venv)."""
        try:
            set_start_at_login(True)
        except OSError as e:
            log.warning("the login entry could not be renewed: %s", e)

    def open_from_tray(self) -> None:
        self.showNormal()
        self.raise_()
        self.activateWindow()

    def unload_model(self, ref: str) -> None:
        """Unload `ref` now (the tray's Unload); an answer it is writing stops first."""
        if self.controller.busy and self.controller.model == ref:
            self.controller.stop(wait=True)
        if self.runtime.unload(ref):
            self.statusBar().showMessage(f"Unloaded {ref}", 5000)
        self.status_line.refresh()  # the tray follows its probe

    def quit_app(self) -> None:
        """Quit from the tray: the window closes for good, and the app with it."""
        self.quitting = True
        self.close()

    def keeps_in_tray(self) -> bool:
        return (self.settings.keep_in_tray and self.tray is not None and self.tray.isVisible()
                and not self.quitting)

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.keeps_in_tray():
            # hidden, not closed: the server keeps serving, the models stay loaded
            event.ignore()
            self.hide()
            if self.tray is not None and not self.told_in_tray:
                self.told_in_tray = True
                self.tray.showMessage(APP_NAME, f"{APP_NAME} keeps running here, with its "
                                      "server. Quit from this icon's menu ends it.")
            return
        self.status_line.stop()
        self.controller.stop(wait=True)
        for row in self.hub.rows.values():
            if row.task is not None:
                row.task.cancel()
        if self.server is not None:
            self.server.stop()
        self.chat_tools.close()
        super().closeEvent(event)
        if self.tray is not None:
            self.tray.hide()
        app = QApplication.instance()
        if isinstance(app, QApplication) and not app.quitOnLastWindowClosed():
            # set so by app.gui.start where there is a tray (a dialog closed while the
            # window is hidden would end Ember): closing the window for good quits
            app.quit()
