"""What the window shows of a chat turn, from its session's events (app.chat.events): the
answer streaming into its widget (its thinking apart, folded and timed when it ends), its
Sources, the tool cards waiting for a decision, the banners, the stats and the context meter.

The context meter counts while an answer streams: the prompt's tokens once the model has
loaded and counted them (PromptCounted), plus one per streamed piece (the backends stream
about a token per piece); the answer's stats set the exact numbers at its end.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.chat.events import (
    AnswerDone,
    AnswerStarted,
    ChatError,
    ChatEvent,
    Loaded,
    MediaRefused,
    Notice,
    PromptCounted,
    Status,
    TextDelta,
    ThinkingDelta,
    ThinkingEnded,
    ToolCallStarted,
    ToolResult,
)
from app.gui.chat_documents import ChatDocuments
from app.gui.chat_view import ChatView, MessageWidget
from app.gui.sources_block import Source, sources_of
from app.gui.tool_card import ToolCard
from app.history import History, HistoryError, StoredMessage
from backends.base import GenerationRequest

DECISIONS = {"allow": "approve", "always": "always", "deny": "deny"}  # card's: session's


class TurnView(QObject):
    stats_shown = Signal(object)  # the last answer's stats (a dict), or None
    status_message = Signal(str)  # work before the answer, for the status bar
    model_failed = Signal(str, str)  # model ref, message (a load error)
    thought = Signal()  # an answer came with thinking (what the model offers may be new)
    decided = Signal(int, str)  # a tool call's message id, the session's Decision
    media_refused = Signal(object)  # a MediaRefused: the chat's images are not given

    def __init__(self, view: ChatView, history: History,
                 documents: ChatDocuments | None) -> None:
        super().__init__(view)
        self.view, self.history, self.documents = view, history, documents
        self.ids: list[int] = []  # the message id of each of the view's messages
        self.conversation_id: int | None = None
        # what the model was given for the answer shown last (None: none asked this turn)
        self.request: GenerationRequest | None = None
        self.answer: MessageWidget | None = None
        self.cards: dict[int, ToolCard] = {}
        # "": work before the first answer (its documents); "answer": one streams; "tool":
        # its calls, or the next answer's tools (a stopped turn ends at once after these)
        self.phase = ""
        self.context_size = 0  # the current model's context, once loaded (0: not known)
        self.contexts: dict[str, int] = {}  # each local model's context when it last loaded
        self.missing_embedder = ""  # the embedding model a failed turn needed
        self.model = ""
        self._prompt_tokens = self._streamed = 0
        self._used = 0  # the meter's count, less the images waiting as chips
        self.pending_tokens = 0  # those images' estimate (app.chat.attachments)

    def begin(self, conversation_id: int, model: str) -> None:
        self.conversation_id, self.model, self.request = conversation_id, model, None
        self.phase = ""
        self.view.show_banner("")

    def show_conversation(self, conversation_id: int, model: str) -> dict | None:
        """Its shown path, the meter at its last answer's use; that answer's stats."""
        self.conversation_id, self.model = conversation_id, model
        self.ids.clear()
        self.cards.clear()
        last_stats = None
        for m in self.history.messages(conversation_id):
            widget = self.view.add_message(m.role, m.content, m.status, m.stats, m.reasoning,
                                           m.tool_calls, self.images_of(m))
            if self.documents is not None:
                self.documents.show_sources(widget, m)
            self.ids.append(m.id)
            last_stats = m.stats or last_stats
        self.context_size = self.contexts.get(model, 0)
        # .get: an imported file's stats need not hold every count
        self.show_use(last_stats.get("prompt_tokens", 0) + last_stats.get(
            "completion_tokens", 0) if last_stats else 0)
        return last_stats

    def cut(self, index: int) -> None:
        self.view.remove_from(index)
        del self.ids[index:]

    def images_of(self, m: StoredMessage) -> list[tuple[str, bytes]]:
        """A question's images from their files; one that is gone, or a clip, shows as its
        name."""
        out = []
        for x in m.media:
            if x.kind != "image":
                out.append((f"{x.kind} clip ({x.ext})", b""))
                continue
            try:
                out.append((x.name, self.history.read_media(x)))
            except HistoryError:
                out.append((f"missing image {x.name[:12]}", b""))
        return out

    def show_use(self, used: int) -> None:
        self._used = used
        self.view.set_context_use(used + self.pending_tokens, self.context_size)

    def set_pending(self, tokens: int) -> None:
        """The images waiting for the next question, counted on the meter before it is
        sent (an estimate: no backend counts a question before it is asked)."""
        self.pending_tokens = tokens
        self.show_use(self._used)

    def show(self, event: ChatEvent) -> None:
        if isinstance(event, TextDelta | ThinkingDelta):
            self._piece(event)
        elif isinstance(event, ThinkingEnded):
            if self.answer is not None:
                self.answer.end_thinking(event.seconds, event.stopped)
        elif isinstance(event, AnswerStarted):
            self._started(event)
        elif isinstance(event, Loaded):
            self.context_size = event.context
            if event.context:
                self.contexts[self.model] = event.context
            if self.answer is not None:
                self.answer.set_status("streaming")
            self.show_use(self._prompt_tokens + self._streamed)
        elif isinstance(event, PromptCounted):
            # a prompt longer than the context is cut to fit it (the request truncates)
            self._prompt_tokens = (min(event.tokens, self.context_size) if self.context_size
                                   else event.tokens)
            self.show_use(self._prompt_tokens + self._streamed)
        elif isinstance(event, AnswerDone):
            self._done(event)
        elif isinstance(event, ToolCallStarted | ToolResult):
            self._tool(event)
        elif isinstance(event, MediaRefused):
            self.media_refused.emit(event)
        elif isinstance(event, Notice):
            self.view.show_banner(event.text)
        elif isinstance(event, Status):
            self.status_message.emit(event.text)
        elif isinstance(event, ChatError):
            self._failed(event)

    def _started(self, event: AnswerStarted) -> None:
        # an answer given beside the last one (asked for words after repeated calls): the
        # one it replaces leaves the shown path
        assert self.conversation_id is not None
        path = {m.id for m in self.history.messages(self.conversation_id)}
        while self.ids and self.ids[-1] not in path:
            self.cut(len(self.ids) - 1)
        self.request, self.phase = event.request, "answer"
        self._prompt_tokens = self._streamed = 0
        answer = self.view.add_message("assistant", "", "streaming")
        assert isinstance(answer, MessageWidget)
        self.answer = answer
        self.ids.append(event.message_id)
        if event.sources:
            used = self.documents.used_by(event.message_id) if self.documents else None
            answer.set_sources(sources_of(used) if used is not None
                               else [Source(c, "") for c in event.sources])
        answer.set_status("streaming",
                               note="Loading the model…" if event.loading else "")

    def _piece(self, event: TextDelta | ThinkingDelta) -> None:
        self._streamed += 1
        self.show_use(self._prompt_tokens + self._streamed)
        if self.answer is None:
            return
        if isinstance(event, TextDelta):
            self.answer.append(event.text)
        else:
            self.answer.append_reasoning(event.text)
        self.view.follow()

    def _done(self, event: AnswerDone) -> None:
        self.phase = "tool"
        if self.answer is not None:
            self.answer.set_text(event.text)
            self.answer.set_tool_calls(event.tool_calls)
            self.answer.set_status(event.status, event.stats, note=event.note)
        self.answer = None
        if event.reasoning:
            self.thought.emit()
        s = event.stats
        self.show_use(s.get("prompt_tokens", 0) + s.get("completion_tokens", 0))
        self.stats_shown.emit(event.stats)

    def _tool(self, event: ToolCallStarted | ToolResult) -> None:
        if isinstance(event, ToolCallStarted):
            card = self.view.add_message("tool", "", "streaming", event.stats)
            assert isinstance(card, ToolCard)
            self.ids.append(event.message_id)
            self.cards[event.message_id] = card
            card.decided.connect(lambda d, i=event.message_id: self._decide(i, d))
        else:
            card = self.cards[event.message_id]
            card.set_outcome(event.outcome, event.text, event.seconds)
            if event.note:
                card.note.setText(f"{card.note.text()} {event.note}")
        self.view.follow()

    def _decide(self, message_id: int, decision: str) -> None:
        card = self.cards.get(message_id)
        if card is not None and card.waiting:  # the session says when it runs (ToolResult)
            self.decided.emit(message_id, DECISIONS[decision])

    def _failed(self, error: ChatError) -> None:
        if self.answer is not None:  # its thinking was ended by the session (ThinkingEnded)
            self.answer.set_text(error.text)
            self.answer.set_status("error", note=error.message)
        self.answer = None
        model = error.model or self.model
        if error.kind == "load":
            self.view.show_banner(f"Could not load {model}: {error.message}",
                                  ("Retry", "Pick a smaller quantization", "Dismiss"))
            self.model_failed.emit(model, error.message)
        elif error.kind == "crash":
            self.view.show_banner(f"The model stopped unexpectedly ({error.message}). Ember "
                                  "restarts it with your next message.", ("Retry", "Dismiss"))
        elif error.kind == "documents" and error.missing_embedder:
            self.missing_embedder = error.missing_embedder
            self.view.show_banner(
                f"The documents do not fit the model's context whole, and choosing the best "
                f"pieces needs the embedding model {error.missing_embedder}, which is not "
                f"installed ({error.message}). Download it, then Retry.",
                ("Download the embedding model", "Retry", "Dismiss"))
        elif error.kind == "documents":
            self.view.show_banner(f"The chat's documents could not be used: {error.message}",
                                  ("Retry", "Dismiss"))
        elif error.kind == "save":
            self.view.show_banner(error.message)
        else:
            self.view.show_banner(f"The answer failed: {error.message}", ("Retry", "Dismiss"))
