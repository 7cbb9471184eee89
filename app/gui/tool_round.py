"""One round of the chat's tool loop: the calls of one answer, in order, each shown as a card,
waiting for the user's decision (unless its tool is allowed always), run on its MCP server off
the UI thread, and stored as a `tool` message the model is given back.

Each call's message is stored before anything runs (status "streaming", with the text a model
would read if Ember stopped before the result), so a kill leaves a conversation whose every
call is answered.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.chat.tools import NOT_RUN, STOPPED, STOPPED_RUNNING, ChatTools
from app.gui.chat_view import ChatView
from app.gui.tool_card import ToolCard
from app.gui.tool_tasks import ToolCallTask
from app.history import History
from app.mcp.config import McpConfigError, McpServerConfig
from app.mcp.connections import McpResult
from app.mcp.tool_loop import ToolIndex, call_arguments, denied_text, failed_text
from backends.base import ToolCall
from backends.errors import InvalidRequestError


class ToolRound(QObject):
    finished = Signal(bool)  # True: every call is answered, ask the model again; False: stopped
    added = Signal(int)  # a call's tool message was stored and shown (its id)

    def __init__(self, tools: ChatTools, index: ToolIndex,
                 servers: dict[str, McpServerConfig], history: History, view: ChatView,
                 conversation_id: int) -> None:
        super().__init__()
        self.tools, self.index, self.servers = tools, index, servers
        self.history, self.view, self.conversation_id = history, view, conversation_id
        self._queue: list[ToolCall] = []
        self._message_id: int | None = None
        self._card: ToolCard | None = None
        self._task: ToolCallTask | None = None
        self.stopped = False

    def start(self, calls: tuple[ToolCall, ...]) -> None:
        self._queue = list(calls)
        self._next()

    def stop(self) -> None:
        """The user stopped the answer: a waiting call and the ones after it are not run; a
        running call is not waited for (the round ends now, its result is dropped)."""
        self.stopped = True
        if self._task is not None:
            self._task.done.disconnect()
            self._task.failed.disconnect()
            self._task = None
            self._settle("stopped", STOPPED_RUNNING)
        elif self._card is not None and self._card.waiting:
            self._settle("stopped", STOPPED)

    def _next(self) -> None:
        if not self._queue:
            self.finished.emit(not self.stopped)
            return
        call = self._queue.pop(0)
        tool = self.index.by_name.get(call.name)
        stats = {"tool": call.name, "server": tool.server if tool else "",
                 "arguments": call.arguments, "outcome": "pending"}
        message = self.history.add_message(self.conversation_id, "tool", NOT_RUN,
                                           "streaming", stats, tool_call_id=call.id,
                                           tool_name=call.name)
        self._message_id = message.id
        card = self.view.add_message("tool", "", "streaming", stats)
        assert isinstance(card, ToolCard)
        self.added.emit(message.id)
        self._card = card
        self.view.follow()
        if self.stopped:
            self._settle("stopped", STOPPED)
            return
        if tool is None:
            offered = ", ".join(self.index.by_name) or "none"
            self._settle("error", failed_text(f"there is no tool {call.name!r} in this chat "
                                              f"(the tools are: {offered})"))
            return
        try:
            self._arguments = call_arguments(call)
        except InvalidRequestError as e:
            self._settle("error", failed_text(str(e)))
            return
        if self.tools.approvals.allowed(self.servers[tool.server], tool.name):
            self._run()
        else:
            card.decided.connect(self._decided)

    def _decided(self, decision: str) -> None:
        tool = self.index.by_name[self._card.stats["tool"]] if self._card else None
        if tool is None or self._card is None or not self._card.waiting:
            return
        if decision == "deny":
            self._settle("denied", denied_text(tool.name))
            return
        if decision == "always":
            try:
                self.tools.approvals.allow_always(self.servers[tool.server], tool.name)
            except (McpConfigError, OSError) as e:  # it runs this once; the card says why
                self._card.note.setText(f"Allowed this once: {e}")
        self._run()

    def _run(self) -> None:
        assert self._card is not None
        tool = self.index.by_name[self._card.stats["tool"]]
        self._card.set_outcome("running")
        self.history.update_message(self._message_id, NOT_RUN, stats=self._card.stats)
        task = ToolCallTask(self.tools.connections, self.servers[tool.server], tool.name,
                            self._arguments)
        task.done.connect(self._done)
        task.failed.connect(lambda why: self._finish_task("error", failed_text(why)))
        self._task = task
        task.start()

    def _done(self, result: McpResult) -> None:
        self._finish_task("error" if result.is_error else "ok", result.text, result.seconds)

    def _finish_task(self, outcome: str, text: str, seconds: float | None = None) -> None:
        self._task = None
        self._settle(outcome, text, seconds)

    def _settle(self, outcome: str, text: str, seconds: float | None = None) -> None:
        """The call's end: its message complete (the text the model reads), its card final."""
        assert self._card is not None and self._message_id is not None
        self._card.set_outcome(outcome, text, seconds)
        # a failure is a result the model must see (status "complete"), so it can try
        # something else or say what went wrong; "stopped" is given back too, with its text
        self.history.update_message(self._message_id, text,
                                    "stopped" if outcome == "stopped" else "complete",
                                    dict(self._card.stats))
        self._card = None
        self.view.follow()
        self._next()
