"""The open chat's choices, apart from its turns: the model and what its Think control offers
(asked of the Runtime off the UI thread, ThinkingSupportTask), the chat's Think setting, the
MCP servers switched on for it (the Tools button) and its preset. A choice made before the
chat exists is kept for it, and given to it when it is made (`create`).

A conversation may use a preset (app.presets): its sampling settings, instead of the app's.
A local model loads with the settings remembered for it (app.presets.ModelLoad), else the
app's (app.chat.request.options_from).
"""

from __future__ import annotations

from PySide6.QtCore import QObject

from app.chat.request import TurnOptions, options_from, think_setting
from app.chat.tools import ChatTools
from app.config import Paths
from app.gui.chat_view import ChatView
from app.gui.tasks import ThinkingSupportTask
from app.history import History
from app.preferences import Settings
from app.presets import Preset, presets
from app.runtime import Runtime
from app.runtime.thinking import ThinkingSupport
from backends.base import SamplingParams
from backends.errors import EmberError


class ChatChoices(QObject):
    def __init__(self, view: ChatView, history: History, runtime: Runtime,
                 settings: Settings, home: Paths | None, tools: ChatTools | None) -> None:
        super().__init__(view)  # answers that come after the window is gone are dropped
        self.view, self.history, self.runtime, self.settings = view, history, runtime, settings
        self.home, self.tools = home, tools
        self.conversation_id: int | None = None
        self.preset_for_new: str | None = None  # the preset picked for the next new chat
        self._pending_servers: tuple[str, ...] | None = None  # switched on before a chat exists
        self._pending_think: str | None = None  # chosen before the chat has a conversation
        self._model: str | None = None
        self.support = ThinkingSupport()  # what the current model's Think control offers
        self.support_task: ThinkingSupportTask | None = None
        view.think_changed.connect(self.set_think)
        view.tools.toggled_servers.connect(self.set_servers)
        view.tools.opening.connect(self.show_tools)

    @property
    def model(self) -> str | None:
        return self._model

    @model.setter
    def model(self, ref: str | None) -> None:
        if ref != self._model:
            self._model = ref
            self.support = ThinkingSupport()
            self.show_think()
            self.refresh_support()

    def refresh_support(self) -> None:
        """Ask what the model's Think control offers; the answer arrives in _support_found."""
        if self._model is None:
            return
        task = ThinkingSupportTask(self.runtime, self._model)
        task.found.connect(self._support_found)
        self.support_task = task
        task.start()

    def _support_found(self, ref: str, support: ThinkingSupport) -> None:
        if ref == self._model:  # not an answer about a model picked before this one
            self.support = support
            self.show_think()

    def show_think(self) -> None:
        stored = (self._pending_think if self.conversation_id is None
                  else self.history.get(self.conversation_id).thinking)
        self.view.set_think_options(self.support.settings, think_setting(stored, self.support))

    def set_think(self, setting: str) -> None:
        """The user picked a Think setting for this chat."""
        if self.conversation_id is None:
            self._pending_think = setting
        else:
            self.history.set_thinking(self.conversation_id, setting)

    def show_tools(self) -> None:
        if self.tools is None:
            self.view.tools.hide()
            return
        servers, error = self.tools.servers_or_error()
        on = (self._pending_servers or () if self.conversation_id is None
              else self.history.mcp_servers(self.conversation_id))
        self.view.tools.set_servers(sorted(servers), set(on), error)

    def set_servers(self, servers: tuple[str, ...]) -> None:
        """The user switched MCP servers on or off for this chat."""
        if self.conversation_id is None:
            self._pending_servers = servers
        else:
            self.history.set_mcp_servers(self.conversation_id, servers)

    def create(self) -> int:
        """A new conversation with the choices made for it."""
        preset = self.preset(self.preset_for_new)
        conv = self.history.create(model=self.model, system_prompt=preset.system_prompt if
                                   preset else self.settings.system_prompt)
        if preset is not None:
            self.history.set_preset(conv.id, preset.name)
        if self._pending_think is not None:
            self.history.set_thinking(conv.id, self._pending_think)
            self._pending_think = None
        if self._pending_servers is not None:
            self.history.set_mcp_servers(conv.id, self._pending_servers)
            self._pending_servers = None
        return conv.id

    def preset(self, name: str | None) -> Preset | None:
        if name is None:
            return None
        try:
            return presets(self.home).get(name)
        except EmberError:  # a broken config.toml: the window says so where it is read
            return None

    def set_preset(self, name: str | None) -> None:
        """The user picked a preset (None: the app's settings) for this chat and new ones: its
        system prompt becomes the chat's, its sampling settings are used from now on."""
        self.preset_for_new = name
        if self.conversation_id is None:
            return
        self.history.set_preset(self.conversation_id, name)
        preset = self.preset(name)
        if preset is not None:
            self.history.set_system_prompt(self.conversation_id, preset.system_prompt)

    def sampling(self) -> SamplingParams:
        """The conversation's preset's sampling settings, else the app's."""
        return self.options().sampling

    def options(self) -> TurnOptions:
        """How this chat's answers are made: the app's settings, the conversation's preset,
        the model's remembered load settings."""
        conv = self.history.get(self.conversation_id) if self.conversation_id else None
        return options_from(self.settings, self.preset(conv.preset if conv
                                                       else self.preset_for_new),
                            self.model, self.runtime.is_remote(self.model or ""), self.home)
