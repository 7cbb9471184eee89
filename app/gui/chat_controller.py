"""What happens when the user sends, stops, regenerates or edits: history first, then the
Runtime on a background task, the view updated from the task's signals.

Every message is in the history before anything is generated, and a streamed answer is saved
as it grows (its thinking too), so a kill at any moment keeps all earlier messages and the
partial answer.

Editing a message or regenerating an answer adds a new version beside the old one (the
history is a tree, app.history_tree); the window shows, and the model is given, the shown
path. A message with versions gets a "< 2/3 >" switcher (app.gui.branch_switcher).

A conversation may use a preset (app.presets): its sampling settings, instead of the app's.
A local model loads with the settings remembered for it (app.presets.ModelLoad), else the
app's.

The context meter counts while an answer streams: the prompt's tokens once the model has
loaded and counted them (GenerationTask.prompt_counted), plus one per streamed piece (the
backends stream about a token per piece); the answer's Stats set the exact numbers at its end.

The Think control follows the model: what it offers comes from the Runtime
(ThinkingSupportTask, off the UI thread), and the choice is the conversation's, in the history.

MCP tools: the servers switched on in the conversation (the Tools button) are started and
listed off the UI thread before each answer (ToolListTask); an answer that calls their tools
hands its calls to a ToolRound (cards, approvals, results), then the model is asked again,
up to STEP_LIMIT rounds.

Documents (app.gui.chat_documents): files attached to the chat go with each question. Before
the answer, what of them fits is chosen off the UI thread (DocumentContextTask: whole when they
fit the context with room to answer, else the best pieces); that block is put before the
question in the request only, so the stored question stays as typed. The library records
which pieces each answer was given: a regenerated answer is given the same ones, and the
window shows them under the answer ("Sources: ..."), their citations kept in its stats too
(`stats["sources"]`, which export and import carry).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.chat.request import (
    TurnOptions,
    build_request,
    options_from,
    think_setting,
    title_from,
)
from app.chat.tools import ChatTools
from app.config import Paths
from app.gui.branch_switcher import show_version
from app.gui.chat_documents import ChatDocuments
from app.gui.chat_view import ChatView, MessageWidget
from app.gui.document_tasks import DocumentContextTask
from app.gui.sources_block import sources_of
from app.gui.tasks import GenerationTask, ThinkingSupportTask
from app.gui.tool_round import ToolRound
from app.gui.tool_tasks import ToolListTask
from app.history import LEAF, History, Leaf, StoredMessage
from app.mcp.tool_loop import (
    ToolIndex,
    call_key,
    next_step,
    step_limit_note,
)
from app.preferences import Settings
from app.presets import Preset, presets
from app.runtime import Runtime
from app.runtime.thinking import ThinkingSupport
from app.sqlite_file import SqliteFileError
from backends.base import (
    DoneEvent,
    GenerationRequest,
    SamplingParams,
    ToolCall,
    ToolCallEvent,
)
from backends.errors import EmberError

if TYPE_CHECKING:
    from app.documents.context import DocumentContext
    from app.documents.library import DocumentLibrary

class ChatController(QObject):
    busy_changed = Signal(bool)
    model_failed = Signal(str, str)  # model ref, message (load errors: offer another quant)
    conversation_changed = Signal()  # title or ordering changed
    preset_shown = Signal(object)  # the open conversation's preset name, or None
    stats_shown = Signal(object)  # the last answer's stats (a dict), or None: the status bar
    status_message = Signal(str)  # work on the chat's documents, for the status bar
    embedding_model_wanted = Signal(str)  # the user asked to download the embedding model

    def __init__(self, view: ChatView, history: History, runtime: Runtime,
                 settings: Settings, home: Paths | None = None,
                 tools: ChatTools | None = None,
                 library: DocumentLibrary | None = None) -> None:
        # a child of its view: answers of background tasks that arrive after the window is
        # gone (a Think support query) are dropped with it, not delivered to deleted widgets
        super().__init__(view)
        self.view, self.history, self.runtime, self.settings = view, history, runtime, settings
        self.home = home  # config.toml's folder (presets, model load settings)
        self.shown_ids: list[int] = []  # the message id of each of the view's messages
        self._editing: StoredMessage | None = None  # the message an edit replaces
        self.preset_for_new: str | None = None  # the preset picked for the next new chat
        self.tools = tools  # None: no MCP (a window without a data folder's mcp.json)
        self._index: ToolIndex | None = None  # the tools offered in the answer being made
        self._servers: dict = {}  # their servers' mcp.json entries, by name
        self._listing: ToolListTask | None = None
        self._round: ToolRound | None = None
        self._steps = 0  # rounds of tool calls since the user's message
        self._failed_servers: dict[str, str] = {}  # servers that failed since then, and why
        self._calls_made: set[tuple[str, str]] = set()  # (tool, arguments) run since then
        self._answer_only = False  # the next answer may not call tools (tool_choice none)
        self._asked_for_words = False  # a repeating model was asked that, once per message
        self._pending_servers: tuple[str, ...] | None = None  # switched on before a chat exists
        self._parent: int | None | Leaf = LEAF  # where the answer being made goes
        self.conversation_id: int | None = None
        self._model: str | None = None
        self.task: GenerationTask | None = None
        self._answer_id: int | None = None
        self._save_failed = False  # the answer streaming now could not be saved (banner shown)
        self._answer: MessageWidget | None = None
        self._text = ""
        self._reasoning = ""
        self._thinking_since: float | None = None  # when the answer's thinking began
        self._thinking_s: float | None = None  # how long it thought (ended by the answer)
        self.context_size = 0  # the current model's context, once loaded (0: not known)
        # each local model's context when it last loaded: known without asking the Runtime,
        # whose lock a load elsewhere (the API server) may hold for seconds
        self.contexts: dict[str, int] = {}
        self._prompt_tokens = 0  # of the answer streaming, counted by its model
        self._streamed = 0  # pieces streamed into it so far (about one token each)
        self.support = ThinkingSupport()  # what the current model's Think control offers
        self._support_task: ThinkingSupportTask | None = None
        self._pending_think: str | None = None  # chosen before the chat has a conversation
        # None: no documents (a window without a data folder's documents.db)
        self.documents = ChatDocuments(library, view) if library is not None else None
        self._context: DocumentContext | None = None  # the documents of the turn answered
        self._context_task: DocumentContextTask | None = None
        self._then_generate: tuple[int | None | Leaf] | None = None  # its parent, once ready
        self._missing_embedder = ""  # the embedding model a failed answer needed
        if self.documents is not None:
            self.documents.status.connect(self.status_message)
            self.documents.failed.connect(self.view.show_banner)
        view.files_chosen.connect(self.attach_files)
        view.send_clicked.connect(self.send)
        view.stop_clicked.connect(self.stop)
        view.regenerate_clicked.connect(self.regenerate)
        view.edit_clicked.connect(self.edit_last)
        view.banner_action.connect(self._banner_action)
        view.think_changed.connect(self.set_think)
        view.tools.toggled_servers.connect(self.set_servers)
        view.tools.opening.connect(self._show_tools)

    @property
    def model(self) -> str | None:
        return self._model

    @model.setter
    def model(self, ref: str | None) -> None:
        if ref != self._model:
            self._model = ref
            self.support = ThinkingSupport()
            self._show_think()
            self.refresh_support()

    def refresh_support(self) -> None:
        """Ask what the model's Think control offers; the answer arrives in _support_found."""
        if self._model is None:
            return
        task = ThinkingSupportTask(self.runtime, self._model)
        task.found.connect(self._support_found)
        self._support_task = task
        task.start()

    def _support_found(self, ref: str, support: ThinkingSupport) -> None:
        if ref == self._model:  # not an answer about a model picked before this one
            self.support = support
            self._show_think()

    def _stored_think(self) -> str | None:
        if self.conversation_id is None:
            return self._pending_think
        return self.history.get(self.conversation_id).thinking

    def _show_think(self) -> None:
        self.view.set_think_options(self.support.settings,
                                    think_setting(self._stored_think(), self.support))

    def set_think(self, setting: str) -> None:
        """The user picked a Think setting for this chat."""
        if self.conversation_id is None:
            self._pending_think = setting
        else:
            self.history.set_thinking(self.conversation_id, setting)

    def _show_tools(self) -> None:
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

    @property
    def busy(self) -> bool:
        return (self.task is not None or self._round is not None or self._listing is not None
                or self._context_task is not None)

    # documents

    def attach_files(self, files: list[Path]) -> None:
        """The paperclip or a drop: the files are read off the UI thread and shown as chips
        of this chat (a new one when none is open); one that cannot be read says why."""
        if not files:
            return
        if self.documents is None:
            self.view.show_banner("Documents cannot be attached in this window.")
            return
        if self.documents.attaching:
            self.status_message.emit("Still reading the files attached before: attach these "
                                     "once they are in")
            return
        if self.conversation_id is None:
            self.new_conversation()
        assert self.conversation_id is not None
        self.documents.attach(self.conversation_id, list(files))

    def _with_documents(self, question: str, replaced_answer: int | None,
                        parent: int | None | Leaf = LEAF) -> None:
        """Generate below `parent` once the chat's documents for `question` are chosen: the
        same pieces as `replaced_answer` (a regenerated answer), else chosen anew."""
        self._context = None
        documents = self.documents
        if documents is None or not documents.documents():
            self._generate(parent=parent)
            return
        used = documents.used_by(replaced_answer) if replaced_answer is not None else None
        if used is not None:
            self._context = used
            self._generate(parent=parent)
            return
        context, gpu_layers, kv_cache = self.load_options()
        backend = None if self.settings.backend == "auto" else self.settings.backend
        task = DocumentContextTask(self.runtime, documents.library, self.conversation_id,
                                   question, self.model, self.request(),
                                   (context, backend, gpu_layers, kv_cache), self.home)
        task.progress.connect(self.status_message)
        task.loaded.connect(self._loaded)
        task.ready.connect(self._context_ready)
        task.failed.connect(self._context_failed)
        self._context_task = task
        self._then_generate = (parent,)
        self.view.show_banner("")
        self.view.set_streaming(True)
        self.busy_changed.emit(True)
        task.start()

    def _context_ready(self, context: DocumentContext) -> None:
        if self.sender() is not self._context_task or self._then_generate is None:
            return  # stopped while the documents were read
        self._context_task = None
        self._context = context
        self.status_message.emit("")
        (parent,) = self._then_generate
        self._then_generate = None
        self._generate(parent=parent)

    def _context_failed(self, why: str, missing_model: str) -> None:
        if self.sender() is not self._context_task:
            return
        self._context_task = None
        self._then_generate = None
        self.status_message.emit("")
        self._end()
        if missing_model:
            self._missing_embedder = missing_model
            self.view.show_banner(
                f"The documents do not fit the model's context whole, and choosing the best "
                f"pieces needs the embedding model {missing_model}, which is not installed "
                f"({why}). Download it, then Retry.",
                ("Download the embedding model", "Retry", "Dismiss"))
        else:
            self.view.show_banner(f"The chat's documents could not be used: {why}",
                                  ("Retry", "Dismiss"))

    def open(self, conversation_id: int) -> None:
        if self.busy:
            self.stop(wait=True)
        conv = self.history.get(conversation_id)
        self.conversation_id = conv.id
        self._editing = None
        self.view.clear()
        self.view.title.setText(conv.title)
        last_stats = None
        self.shown_ids = []
        if self.documents is not None:
            self.documents.show(conv.id)
        for m in self.history.messages(conv.id):
            widget = self.view.add_message(m.role, m.content, m.status, m.stats, m.reasoning,
                                           m.tool_calls)
            if self.documents is not None:
                self.documents.show_sources(widget, m)
            self.shown_ids.append(m.id)
            if m.stats:
                last_stats = m.stats
        self._show_versions()
        self.preset_shown.emit(conv.preset)
        # .get: an imported file's stats need not hold every count
        used = (last_stats.get("prompt_tokens", 0) + last_stats.get("completion_tokens", 0)
                if last_stats else 0)
        self.context_size = self.contexts.get(self.model or "", 0)
        self.view.set_context_use(used, self.context_size)
        self.stats_shown.emit(last_stats)
        self.view.set_streaming(False)
        self._show_think()
        self._show_tools()

    def new_conversation(self) -> int:
        if self.busy:
            self.stop(wait=True)
        preset = self._preset(self.preset_for_new)
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
        self.open(conv.id)
        self.conversation_changed.emit()
        return conv.id

    def send(self) -> None:
        try:
            self._send()
        except SqliteFileError as e:  # the message stays in the box: nothing is lost
            self.view.show_banner(f"Not sent: the chat could not be saved. {e}")

    def _not_saved(self, error: SqliteFileError) -> None:
        """A streamed answer that cannot be saved goes on on screen, with one banner."""
        if not self._save_failed:
            self._save_failed = True
            self.view.show_banner(f"This answer is not being saved: {error}")

    def _save_answer(self, text: str, status: str | None = None, stats: dict | None = None,
                     reasoning: str | None = None,
                     tool_calls: tuple[ToolCall, ...] | None = None) -> None:
        try:
            self.history.update_message(self._answer_id, text, status, stats,
                                        reasoning=reasoning, tool_calls=tool_calls)
        except SqliteFileError as e:
            self._not_saved(e)

    def _send(self) -> None:
        text = self.view.composer.toPlainText()
        if self.busy or not text.strip():
            return
        if self.documents is not None and self.documents.attaching:
            self.status_message.emit("The attached files are still being read: send once "
                                     "they show above the message box")
            return
        if self.model is None:
            self.view.show_banner("No model is installed yet: download one from the Models page.")
            return
        if self.conversation_id is None:
            self.new_conversation()
        conv = self.history.get(self.conversation_id)
        if not any(m.role == "user" for m in self.history.messages(conv.id)):
            self.history.rename(conv.id, title_from(text))
            self.view.title.setText(title_from(text))
        self.history.set_model(conv.id, self.model)
        # an edit is a new version beside the message it replaces; else the path goes on
        parent = self._editing.parent_id if self._editing is not None else LEAF
        self._editing = None
        stored = self.history.add_message(conv.id, "user", text, parent_id=parent)
        self.view.composer.clear()
        self.view.add_message("user", text)
        self.shown_ids.append(stored.id)
        self.conversation_changed.emit()
        self._new_turn()
        self._with_documents(text, None)

    def regenerate(self) -> None:
        """A new version of the last answer, beside the old one (which stays, one click away
        on its switcher)."""
        if self.busy or self.conversation_id is None:
            return
        if self._editing is not None:  # an edit left unsent: the shown path comes back whole
            self.open(self.conversation_id)
        messages = self.history.messages(self.conversation_id)
        if messages and messages[-1].role == "user":  # a question left unanswered (Retry)
            self._new_turn()
            self._with_documents(messages[-1].content, None)
            return
        last = next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].role == "assistant"), None)
        if last is None:
            return
        question = next((m.content for m in reversed(messages[:last]) if m.role == "user"), "")
        self._cut_view(last)
        self._new_turn()
        self._with_documents(question, messages[last].id, parent=messages[last].parent_id)

    def edit_last(self) -> None:
        """Put the last user message back in the composer; sending it adds a new version of
        that message (the old one and its answers stay, on the switcher)."""
        if self.busy or self.conversation_id is None:
            return
        messages = self.history.messages(self.conversation_id)
        last = next((m for m in reversed(messages) if m.role == "user"), None)
        if last is not None:
            self.edit(last.id)

    def edit(self, message_id: int) -> None:
        """Put a question back in the composer, the conversation shown up to it; sending
        adds a new version of it (Edit under each question, and Edit last message)."""
        if self.busy or self.conversation_id is None:
            return
        if self._editing is not None:  # another edit left unsent: the whole path again
            self.open(self.conversation_id)
        messages = self.history.messages(self.conversation_id)
        index = next((i for i, m in enumerate(messages) if m.id == message_id), None)
        if index is None:
            return
        self._editing = messages[index]
        self._cut_view(index)
        self.view.composer.setPlainText(messages[index].content)
        self.view.composer.setFocus()
        self.view.set_streaming(False)

    def _cut_view(self, index: int) -> None:
        self.view.remove_from(index)
        del self.shown_ids[index:]

    def switch_to(self, message_id: int) -> None:
        """Show another version of a turn, with the path below it."""
        if self.busy or self.conversation_id is None:
            return
        self.history.switch_to(message_id)
        self.open(self.conversation_id)

    def _show_versions(self) -> None:
        """A switcher under each shown message that has other versions."""
        if self.conversation_id is None:
            return
        place = self.history.versions(self.conversation_id)
        for widget, message_id in zip(self.view.messages, self.shown_ids, strict=False):
            if message_id in place:
                show_version(widget, message_id, place[message_id], widget.role == "user",
                             self.switch_to, self.edit, not self.busy)

    # presets

    def _preset(self, name: str | None) -> Preset | None:
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
        preset = self._preset(name)
        if preset is not None:
            self.history.set_system_prompt(self.conversation_id, preset.system_prompt)

    def sampling(self) -> SamplingParams:
        """The conversation's preset's sampling settings, else the app's."""
        return self.options().sampling

    def load_options(self) -> tuple[int | None, int | None, str | None]:
        """Context, GPU layers and KV cache type to load the model with: its own remembered
        settings, else the app's, else (None) the load plan's."""
        o = self.options()
        return o.context, o.gpu_layers, o.kv_cache

    def stop(self, wait: bool = False) -> None:
        if self._listing is not None:  # its answer, when it comes, is dropped
            self._listing = None
            self._end()
        if self._context_task is not None:  # the same: the question stays, unanswered
            task, self._context_task, self._then_generate = self._context_task, None, None
            self.status_message.emit("")
            self._end()
            if wait:
                task.wait(30)
        if self._round is not None:
            self._round.stop()  # denies what waits; the round ends the answer
        if self.task is not None:
            self.task.stop()
            if wait:
                self.task.wait(30)

    def request(self) -> GenerationRequest:
        """The conversation as the model is given it (app.chat.request.build_request)."""
        conv = self.history.get(self.conversation_id)
        tools = self._index.request_tools() if self._index is not None else ()
        return build_request(conv, self.history.messages(conv.id), self.options(),
                             self.support, tools,
                             self._context.prompt_text if self._context else "",
                             self._answer_only)

    def options(self) -> TurnOptions:
        """How this chat's answers are made: the app's settings, the conversation's preset,
        the model's remembered load settings."""
        conv = self.history.get(self.conversation_id) if self.conversation_id else None
        return options_from(self.settings, self._preset(conv.preset if conv
                                                        else self.preset_for_new),
                            self.model, self.runtime.is_remote(self.model or ""), self.home)

    def _new_turn(self) -> None:
        self._context = None  # chosen for the new turn by _with_documents
        self._steps = 0
        self._failed_servers = {}  # a server that failed is tried again at the next message
        self._calls_made = set()
        self._asked_for_words = False

    def _generate(self, parent: int | None | Leaf = LEAF, answer_only: bool = False) -> None:
        """Answer below `parent` (by default the shown path's end; a regenerated answer goes
        beside the old one): first the tools of the chat's MCP servers (started off the UI
        thread); `answer_only`: offered, but not to be called (the answer must be words)."""
        self._answer_only = answer_only
        self._parent = parent
        self.view.show_banner("")
        self._index = None
        on = self.history.mcp_servers(self.conversation_id) if self.tools is not None else ()
        servers, error = self.tools.servers_or_error() if on and self.tools else ({}, "")
        if error:
            self.view.show_banner(f"MCP tools are off for this answer: {error}")
        self._servers = {name: servers[name] for name in on
                         if name in servers and name not in self._failed_servers}
        if not self._servers:
            self._show_tool_problems()
            self._answer_now()
            return
        self._listing = ToolListTask(self.tools.connections, list(self._servers.values()))
        self._listing.listed.connect(self._tools_listed)
        self.view.set_streaming(True)
        self.busy_changed.emit(True)
        self._listing.start()

    def _tools_listed(self, tools: list, failed: dict) -> None:
        if self.sender() is not self._listing:
            return  # stopped while the servers started
        self._listing = None
        self._index = ToolIndex.of(tools)
        self._failed_servers.update(failed)
        self._show_tool_problems()
        self._answer_now()

    def _show_tool_problems(self) -> None:
        """One line per server that failed (the chat goes on with the tools that work)."""
        problems = list(self._failed_servers.values())
        if self._index is not None:
            problems += [f"tool {name} left out: {why}"
                         for name, why in self._index.problems.items()]
        if problems:
            self.view.show_banner(" · ".join(problems))

    def _answer_now(self) -> None:
        """The answer is stored first, so the path it ends is the shown one, and the request
        is that path."""
        self._save_failed = False
        try:
            answer = self.history.add_message(self.conversation_id, "assistant", "",
                                              status="streaming", model=self.model,
                                              parent_id=self._parent)
        except SqliteFileError as e:
            self.view.show_banner(f"No answer: the chat could not be saved. {e}")
            self._end()
            return
        request = self.request()
        self._answer_id, self._text, self._reasoning = answer.id, "", ""
        self._prompt_tokens = self._streamed = 0
        self._thinking_since = self._thinking_s = None
        self._answer = self.view.add_message("assistant", "", "streaming")
        self.shown_ids.append(answer.id)
        if self._context is not None and self.documents is not None:
            self.documents.record(answer.id, self._context)
            self._answer.set_sources(sources_of(self._context))
        self._answer.set_status("streaming", note="Loading the model…"
                                if not self._is_loaded() else "")
        backend = None if self.settings.backend == "auto" else self.settings.backend
        context, gpu_layers, kv_cache = self.load_options()
        self.task = GenerationTask(self.runtime, self.model, request, context, backend,
                                   gpu_layers, kv_cache)
        self.task.loaded.connect(self._loaded)
        self.task.prompt_counted.connect(self._prompt_counted)
        self.task.token.connect(self._token)
        self.task.reasoning.connect(self._reasoning_piece)
        self.task.tool_call.connect(self._tool_call)
        self.task.finished.connect(self._finished)
        self.task.failed.connect(self._failed)
        self.view.set_streaming(True)
        self.busy_changed.emit(True)
        self._show_versions()  # busy now: the switchers are off until the answer ends
        self.task.start()

    def _is_loaded(self) -> bool:
        return self.runtime.is_remote(self.model or "") or any(
            lm.model.ref == self.model for lm in self.runtime.loaded())

    def _loaded(self, loaded) -> None:  # app.runtime.LoadedModel, None: remote
        self.context_size = loaded.plan.context if loaded is not None else 0
        if loaded is not None:
            self.contexts[loaded.model.ref] = loaded.plan.context
        if self._answer is not None:
            self._answer.set_status("streaming")
        self._show_streaming_use()

    def _prompt_counted(self, tokens: int) -> None:
        # a prompt longer than the context is cut to fit it (the request truncates)
        self._prompt_tokens = min(tokens, self.context_size) if self.context_size else tokens
        self._show_streaming_use()

    def _streamed_piece(self) -> None:
        self._streamed += 1
        self._show_streaming_use()

    def _show_streaming_use(self) -> None:
        self.view.set_context_use(self._prompt_tokens + self._streamed, self.context_size)

    def _reasoning_piece(self, piece: str) -> None:
        self._streamed_piece()
        if self._thinking_since is None:
            self._thinking_since = time.monotonic()
        self._reasoning += piece
        self._save_answer(self._text, reasoning=self._reasoning)
        if self._answer is not None:
            self._answer.append_reasoning(piece)
            self.view.follow()

    def _end_thinking(self, stopped: bool = False) -> None:
        """The answer (or a call, or the end) came: the thinking block folds, timed."""
        if self._thinking_since is not None and self._thinking_s is None:
            self._thinking_s = time.monotonic() - self._thinking_since
            if self._answer is not None:
                self._answer.end_thinking(self._thinking_s, stopped)

    def _token(self, piece: str) -> None:
        self._streamed_piece()
        self._end_thinking()
        self._text += piece
        self._save_answer(self._text)
        if self._answer is not None:
            self._answer.append(piece)
            self.view.follow()

    def _tool_call(self, _event: ToolCallEvent) -> None:
        self._streamed_piece()
        self._end_thinking()  # the calls themselves are shown whole, when the answer ends

    def _finished(self, done: DoneEvent) -> None:
        stats, text = done.stats, done.text
        status = "stopped" if stats.finish_reason == "cancelled" else "complete"
        calls = done.tool_calls if status == "complete" and self._index is not None and \
            self._index.by_name else ()
        self._end_thinking(stopped=status == "stopped")
        data = asdict(stats)
        if self._context is not None:  # the citations travel with the answer (export)
            data["sources"] = [p.citation() for p in self._context.pieces]
        if done.reasoning:
            data["thinking_s"] = round(self._thinking_s or 0.0, 2)
        self._save_answer(text, status, data, reasoning=done.reasoning,
                          tool_calls=done.tool_calls)
        if self._answer is not None:
            self._answer.set_text(text)
            self._answer.set_tool_calls(done.tool_calls)
            self._answer.set_status(status, data)
        if done.reasoning and not self.support.thinks:
            self.refresh_support()  # a remote server that said nothing: now it is known
        self.view.set_context_use(stats.prompt_tokens + stats.completion_tokens,
                                  self.context_size)
        self.stats_shown.emit(data)
        if stats.truncated:
            self.view.show_banner("The conversation no longer fits the model's context: the "
                                  "earliest turns were dropped for this answer. Start a new "
                                  "chat or raise the context length in Settings.")
        step = next_step(calls, self._calls_made, self._asked_for_words, self._steps)
        if step == "ask_for_words":
            # only calls whose results it has: ask for an answer in words beside this one
            # (once: a model that calls tools even then goes on to the step limit); the
            # repeating answer stays as an earlier version, with its calls not run
            self._asked_for_words = True
            parent = self.history.messages(self.conversation_id)[-1].parent_id
            self._cut_view(len(self.view.messages) - 1)
            self.task = None
            self._answer = None
            self._generate(parent=parent, answer_only=True)
            return
        if step == "step_limit":
            if self._answer is not None:
                self._answer.set_status(status, data, note=step_limit_note())
        elif step == "run":
            self._run_tools(calls)
            return
        self._end()

    def _run_tools(self, calls: tuple) -> None:
        """The answer called tools: a round of cards, then (unless stopped) the model again."""
        self._steps += 1
        self._calls_made.update(call_key(c) for c in calls)
        self.task = None
        self._answer = None
        self._round = ToolRound(self.tools, self._index, self._servers, self.history,
                                self.view, self.conversation_id)
        self._round.finished.connect(self._round_finished)
        self._round.added.connect(self._tool_message_shown)
        self._round.start(calls)

    def _tool_message_shown(self, message_id: int) -> None:
        self.shown_ids.append(message_id)

    def _round_finished(self, go_on: bool) -> None:
        self._round = None
        if go_on:
            self._generate()
        else:
            self._end()

    def _failed(self, message: str, kind: str, text: str) -> None:
        model = self.task.model if self.task is not None else self.model
        self._end_thinking(stopped=True)
        self._save_answer(text, "error", reasoning=self._reasoning)
        if self._answer is not None:
            self._answer.set_text(text)
            self._answer.set_status("error", note=message)
        if kind == "load":
            self.view.show_banner(f"Could not load {model}: {message}",
                                  ("Retry", "Pick a smaller quantization", "Dismiss"))
            self.model_failed.emit(model or "", message)
        elif kind == "crash":
            self.view.show_banner(f"The model stopped unexpectedly ({message}). Ember restarts "
                                  "it with your next message.", ("Retry", "Dismiss"))
        else:
            self.view.show_banner(f"The answer failed: {message}", ("Retry", "Dismiss"))
        self._end()

    def _end(self) -> None:
        self.task = None
        self._answer = None
        self.view.set_streaming(False)
        self._show_versions()
        self.busy_changed.emit(False)

    def _banner_action(self, action: str) -> None:
        if action == "Download the embedding model":
            self.embedding_model_wanted.emit(self._missing_embedder)
            self.view.show_banner("")
        elif action == "Retry":
            self.regenerate()
        elif action == "Dismiss":
            self.view.show_banner("")
