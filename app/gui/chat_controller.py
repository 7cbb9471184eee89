"""The window's chat: wiring between the chat view and app.chat's ChatSession, which owns a
turn (the request, the documents, the MCP tool loop, the context policy, what is saved when;
docs/notes/chat-session.md). A turn runs on a worker thread (app.gui.turn_task), and its
events are shown by app.gui.turn_view; a tool call waits on its card until the user decides.

Editing a message or regenerating an answer adds a new version beside the old one (the
history is a tree, app.history_tree); the window shows, and the model is given, the shown
path. A message with versions gets a "< 2/3 >" switcher (app.gui.branch_switcher). The
chat's model, Think setting, MCP servers and preset are app.gui.chat_choices'.

Images pasted, dropped or chosen are checked by the session (ChatSession.attach: a broken
one, or a model that cannot see, is said on the banner with the models that can) and wait as
chips for the next question, counted on the context meter by estimate until it is sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.chat.attachments import estimated_tokens
from app.chat.events import ChatEvent, Decision, MediaRefused
from app.chat.session import ChatSession
from app.chat.tools import ChatTools
from app.config import Paths
from app.gui.branch_switcher import show_version
from app.gui.chat_choices import ChatChoices
from app.gui.chat_documents import ChatDocuments
from app.gui.chat_view import ChatView
from app.gui.image_chips import is_media_file
from app.gui.turn_task import TurnTask, Work
from app.gui.turn_view import TurnView
from app.history import History, StoredMessage
from app.preferences import Settings
from app.runtime import Runtime
from app.sqlite_file import SqliteFileError

if TYPE_CHECKING:
    from app.documents.library import DocumentLibrary

STOP_WAIT_S = 2.0  # a stopped tool call settles within the session's poll (0.1 s)


class ChatController(QObject):
    busy_changed = Signal(bool)
    model_failed = Signal(str, str)  # model ref, message (load errors: offer another quant)
    conversation_changed = Signal()  # title or ordering changed
    preset_shown = Signal(object)  # the open conversation's preset name, or None
    stats_shown = Signal(object)  # the last answer's stats (a dict), or None: the status bar
    status_message = Signal(str)  # work on the chat's documents, for the status bar
    embedding_model_wanted = Signal(str)  # the user asked to download the embedding model
    model_wanted = Signal(str)  # a model the user asked to switch to (one that sees)

    def __init__(self, view: ChatView, history: History, runtime: Runtime,
                 settings: Settings, home: Paths | None = None,
                 tools: ChatTools | None = None,
                 library: DocumentLibrary | None = None) -> None:
        # a child of its view: answers of background tasks that arrive after the window is
        # gone (a Think support query) are dropped with it, not delivered to deleted widgets
        super().__init__(view)
        self.view, self.history, self.runtime, self.settings = view, history, runtime, settings
        self.home = home  # config.toml's folder (presets, model load settings)
        self.tools = tools  # None: no MCP (a window without a data folder's mcp.json)
        # None: no documents (a window without a data folder's documents.db)
        self.documents = ChatDocuments(library, view) if library is not None else None
        self._editing: StoredMessage | None = None  # the message an edit replaces
        self.task: TurnTask | None = None  # the turn being made
        self.choices = ChatChoices(view, history, runtime, settings, home, tools)
        self.turns = TurnView(view, history, self.documents)
        self.turns.stats_shown.connect(self.stats_shown)
        self.turns.status_message.connect(self.status_message)
        self.turns.model_failed.connect(self.model_failed)
        # an answer that thought, from a remote server that said nothing of it: now it is known
        self.turns.thought.connect(lambda: None if self.choices.support.thinks else
                                   self.choices.refresh_support())
        self.turns.decided.connect(self._decided)
        self.turns.media_refused.connect(self._media_refused)
        self._seeing: tuple[str, ...] = ()  # the models a refused image named
        if self.documents is not None:
            self.documents.status.connect(self.status_message)
            self.documents.failed.connect(self.view.show_banner)
        view.files_chosen.connect(self.attach_files)
        view.image_pasted.connect(self.attach_image)
        view.image_chips.changed.connect(lambda: self.turns.set_pending(
            estimated_tokens(view.image_chips.attachments)))
        view.send_clicked.connect(self.send)
        view.stop_clicked.connect(self.stop)
        view.regenerate_clicked.connect(self.regenerate)
        view.edit_clicked.connect(self.edit_last)
        view.banner_action.connect(self._banner_action)

    @property
    def model(self) -> str | None:
        return self.choices.model

    @model.setter
    def model(self, ref: str | None) -> None:
        self.choices.model = ref

    @property
    def conversation_id(self) -> int | None:
        return self.choices.conversation_id

    @conversation_id.setter
    def conversation_id(self, conversation_id: int | None) -> None:
        self.choices.conversation_id = conversation_id

    @property
    def busy(self) -> bool:
        return self.task is not None

    def attach_files(self, files: list[Path]) -> None:
        """The paperclip or a drop: the files are read off the UI thread and shown as chips
        of this chat (a new one when none is open); one that cannot be read says why."""
        images = [f for f in files if is_media_file(f)]
        for image in images:
            self.attach_image(image)
        files = [f for f in files if not is_media_file(f)]
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

    def attach_image(self, source: Path | bytes) -> bool:
        """An image (a file, or pasted bytes) for the next question: a chip, or the banner
        saying why not (a broken file; a model that cannot see, with those that can)."""
        if self.model is None:
            self.view.show_banner("No model is installed yet: download one from the Models page.")
            return False
        if self.conversation_id is None:
            self.new_conversation()

        def refused(event: ChatEvent) -> None:
            if isinstance(event, MediaRefused):
                self._media_refused(event)
        attachment = self.session().attach(source, refused)
        if attachment is None:
            return False
        self.view.image_chips.add(attachment)
        return True

    def _media_refused(self, event: MediaRefused) -> None:
        """The banner says why; where the chat's model is the reason and another installed
        model sees, it offers to switch to it."""
        self._seeing = event.seeing if event.model else ()
        actions = ("Switch to a model that sees", "Dismiss") if self._seeing else ("Dismiss",)
        self.view.show_banner(event.text, actions)

    def open(self, conversation_id: int) -> None:
        if self.busy:
            self.stop(wait=True)
        conv = self.history.get(conversation_id)
        self.conversation_id = conv.id
        self._editing = None
        self.view.clear()
        self.view.image_chips.clear()  # they were for another chat's next question
        self.view.title.setText(conv.title)
        if self.documents is not None:
            self.documents.show(conv.id)
        last_stats = self.turns.show_conversation(conv.id, self.model or "")
        self._show_versions()
        self.preset_shown.emit(conv.preset)
        self.stats_shown.emit(last_stats)
        self.view.set_streaming(False)
        self.choices.show_think()
        self.choices.show_tools()

    def new_conversation(self) -> int:
        if self.busy:
            self.stop(wait=True)
        conversation_id = self.choices.create()
        self.open(conversation_id)
        self.conversation_changed.emit()
        return conversation_id

    def send(self) -> None:
        try:
            self._send()
        except SqliteFileError as e:  # the message stays in the box: nothing is lost
            self.view.show_banner(f"Not sent: the chat could not be saved. {e}")

    def _send(self) -> None:
        text = self.view.composer.toPlainText()
        images = self.view.image_chips.attachments
        if self.busy or not (text.strip() or images
                             or (self._editing is not None and self._editing.media)):
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
        session = self.session()
        # an edit is a new version beside the message it replaces; else the path goes on
        # (an edit sent without new images keeps its question's)
        stored = session.ask(text, self._editing, images or None)
        self._editing = None
        self.view.title.setText(self.history.get(session.conversation_id).title)
        self.view.composer.clear()
        self.view.image_chips.clear()
        self.view.add_message("user", text, images=self.turns.images_of(stored))
        self.turns.ids.append(stored.id)
        self.conversation_changed.emit()
        self._start(session, lambda s, show, approve: s.answer(text, show, approve))

    def regenerate(self) -> None:
        """A new version of the last answer, beside the old one (which stays, one click away
        on its switcher); a question left unanswered (Retry) is answered."""
        if self.busy or self.conversation_id is None or self.model is None:
            return
        if self._editing is not None:  # an edit left unsent: the shown path comes back whole
            self.open(self.conversation_id)
        messages = self.history.messages(self.conversation_id)
        last = next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].role == "assistant"), None)
        if not messages or (messages[-1].role != "user" and last is None):
            return
        if messages[-1].role != "user" and last is not None:
            self.turns.cut(last)
        self._start(self.session(), ChatSession.retry)

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
        self.turns.cut(index)
        self.view.composer.setPlainText(messages[index].content)
        self.view.composer.setFocus()
        self.view.set_streaming(False)

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
        for widget, message_id in zip(self.view.messages, self.turns.ids, strict=False):
            if message_id in place:
                show_version(widget, message_id, place[message_id], widget.role == "user",
                             self.switch_to, self.edit, not self.busy)

    # the turn

    def session(self) -> ChatSession:
        """The open chat's session, as its settings are now (one per turn)."""
        assert self.conversation_id is not None and self.model is not None
        library = self.documents.library if self.documents is not None else None
        return ChatSession(self.history, self.runtime, self.conversation_id, self.model,
                           self.choices.options(), self.tools, library, self.home,
                           self.choices.support)

    def _start(self, session: ChatSession, work: Work) -> None:
        task = TurnTask(session, work)
        task.happened.connect(lambda event: self._show(task, event))
        task.ended.connect(lambda: self._show(task, None))
        self.task = task
        self.turns.begin(session.conversation_id, session.model)
        self.view.set_streaming(True)
        self.busy_changed.emit(True)
        self._show_versions()  # busy now: the switchers are off until the answer ends
        task.start()

    def _show(self, task: TurnTask, event: ChatEvent | None) -> None:
        """An event of `task` (None: it ended); dropped for a turn stopped and left."""
        if task is self.task:
            self.turns.show(event) if event is not None else self._end()

    def _decided(self, message_id: int, decision: Decision) -> None:
        if self.task is not None:
            self.task.decide(message_id, decision)

    def stop(self, wait: bool = False) -> None:
        """End the turn: an answer streaming is saved "stopped" as it ends; a tool call
        waiting or running settles "stopped" before this returns; work before the answer
        (its documents, the tools' servers) is left at once, and starts nothing."""
        task = self.task
        if task is None:
            return
        task.stop()
        if wait or not self.turns.phase:
            self._end()  # its events, from now on, are dropped
            if wait:
                task.wait(30)
        elif self.turns.phase == "tool" and task.wait(STOP_WAIT_S):
            task.drain()

    def _end(self) -> None:
        self.task = None
        self.turns.answer = None
        self.turns.phase = ""
        self.view.set_streaming(False)
        self._show_versions()
        self.busy_changed.emit(False)

    def _banner_action(self, action: str) -> None:
        if action == "Download the embedding model":
            self.embedding_model_wanted.emit(self.turns.missing_embedder)
            self.view.show_banner("")
        elif action == "Retry":
            self.regenerate()
        elif action == "Switch to a model that sees" and self._seeing:
            self.model_wanted.emit(self._seeing[0])
            self.view.show_banner("")
        elif action == "Dismiss":
            self.view.show_banner("")
