"""What happens when the user sends, stops, regenerates or edits: history first, then the
Runtime on a background task, the view updated from the task's signals.

Every message is in the history before anything is generated, and a streamed answer is saved
as it grows, so a kill at any moment keeps all earlier messages and the partial answer.
"""

from __future__ import annotations

from dataclasses import asdict

from PySide6.QtCore import QObject, Signal

from app.gui.chat_view import ChatView, MessageWidget
from app.gui.tasks import GenerationTask
from app.history import History
from app.preferences import Settings
from app.runtime import Runtime
from backends.base import (
    GenerationRequest,
    Message,
    SamplingParams,
    SpeculativeParams,
    Stats,
)

KEPT_STATUSES = ("complete", "stopped", "interrupted")  # what the model sees of the past
TITLE_CHARS = 48


def title_from(text: str) -> str:
    first = " ".join(text.split())
    return first if len(first) <= TITLE_CHARS else first[:TITLE_CHARS - 1] + "…"


class ChatController(QObject):
    busy_changed = Signal(bool)
    model_failed = Signal(str, str)  # model ref, message (load errors: offer another quant)
    conversation_changed = Signal()  # title or ordering changed

    def __init__(self, view: ChatView, history: History, runtime: Runtime,
                 settings: Settings) -> None:
        super().__init__()
        self.view, self.history, self.runtime, self.settings = view, history, runtime, settings
        self.conversation_id: int | None = None
        self.model: str | None = None
        self.task: GenerationTask | None = None
        self._answer_id: int | None = None
        self._answer: MessageWidget | None = None
        self._text = ""
        self.context_size = 0
        view.send_clicked.connect(self.send)
        view.stop_clicked.connect(self.stop)
        view.regenerate_clicked.connect(self.regenerate)
        view.edit_clicked.connect(self.edit_last)
        view.banner_action.connect(self._banner_action)

    @property
    def busy(self) -> bool:
        return self.task is not None

    def open(self, conversation_id: int) -> None:
        if self.busy:
            self.stop(wait=True)
        conv = self.history.get(conversation_id)
        self.conversation_id = conv.id
        self.view.clear()
        self.view.title.setText(conv.title)
        last_stats = None
        for m in self.history.messages(conv.id):
            self.view.add_message(m.role, m.content, m.status, m.stats)
            if m.stats:
                last_stats = m.stats
        used = (last_stats["prompt_tokens"] + last_stats["completion_tokens"]
                if last_stats else 0)
        self.view.set_context_use(used, self.context_size or max(used, 1))
        self.view.set_streaming(False)

    def new_conversation(self) -> int:
        if self.busy:
            self.stop(wait=True)
        conv = self.history.create(model=self.model, system_prompt=self.settings.system_prompt)
        self.open(conv.id)
        self.conversation_changed.emit()
        return conv.id

    def send(self) -> None:
        text = self.view.composer.toPlainText()
        if self.busy or not text.strip():
            return
        if self.model is None:
            self.view.show_banner("No model is installed yet: download one from Get models.")
            return
        if self.conversation_id is None:
            self.new_conversation()
        conv = self.history.get(self.conversation_id)
        if not any(m.role == "user" for m in self.history.messages(conv.id)):
            self.history.rename(conv.id, title_from(text))
            self.view.title.setText(title_from(text))
        self.history.set_model(conv.id, self.model)
        self.history.add_message(conv.id, "user", text)
        self.view.composer.clear()
        self.view.add_message("user", text)
        self.conversation_changed.emit()
        self._generate()

    def regenerate(self) -> None:
        if self.busy or self.conversation_id is None:
            return
        messages = self.history.messages(self.conversation_id)
        last = next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].role == "assistant"), None)
        if last is None:
            return
        self.history.delete_messages_from(messages[last].id)
        self.view.remove_from(last)
        self._generate()

    def edit_last(self) -> None:
        """Put the last user message back in the composer and drop it and what followed."""
        if self.busy or self.conversation_id is None:
            return
        messages = self.history.messages(self.conversation_id)
        last = next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].role == "user"), None)
        if last is None:
            return
        self.history.delete_messages_from(messages[last].id)
        self.view.remove_from(last)
        self.view.composer.setPlainText(messages[last].content)
        self.view.composer.setFocus()
        self.view.set_streaming(False)

    def stop(self, wait: bool = False) -> None:
        if self.task is not None:
            self.task.stop()
            if wait:
                self.task.wait(30)

    def request(self) -> GenerationRequest:
        conv = self.history.get(self.conversation_id)
        history = [Message(m.role, m.content) for m in self.history.messages(conv.id)
                   if m.role in ("user", "assistant") and m.status in KEPT_STATUSES
                   and m.content.strip()]
        system = (Message("system", conv.system_prompt),) if conv.system_prompt.strip() else ()
        s = self.settings
        sampling = SamplingParams(temperature=s.temperature, top_p=s.top_p,
                                  max_tokens=s.max_tokens)
        speculative = None
        if s.speculative and not self.runtime.is_remote(self.model or ""):
            speculative = (SpeculativeParams(method="draft", draft_model=s.draft_model)
                           if s.draft_model else SpeculativeParams(method="lookup"))
        return GenerationRequest(messages=system + tuple(history), sampling=sampling,
                                 speculative=speculative)

    def _generate(self) -> None:
        self.view.show_banner("")
        request = self.request()
        answer = self.history.add_message(self.conversation_id, "assistant", "",
                                          status="streaming", model=self.model)
        self._answer_id, self._text = answer.id, ""
        self._answer = self.view.add_message("assistant", "", "streaming")
        self._answer.set_status("streaming", note="Loading the model…"
                                if not self._is_loaded() else "")
        backend = None if self.settings.backend == "auto" else self.settings.backend
        gpu_layers = self.settings.gpu_layers if self.settings.gpu_layers >= 0 else None
        self.task = GenerationTask(self.runtime, self.model, request,
                                   self.settings.context or None, backend, gpu_layers)
        self.task.loaded.connect(self._loaded)
        self.task.token.connect(self._token)
        self.task.finished.connect(self._finished)
        self.task.failed.connect(self._failed)
        self.view.set_streaming(True)
        self.busy_changed.emit(True)
        self.task.start()

    def _is_loaded(self) -> bool:
        return self.runtime.is_remote(self.model or "") or any(
            lm.model.ref == self.model for lm in self.runtime.loaded())

    def _loaded(self, loaded) -> None:  # app.runtime.LoadedModel, None: remote
        self.context_size = loaded.plan.context if loaded is not None else 0
        if self._answer is not None:
            self._answer.set_status("streaming")

    def _token(self, piece: str) -> None:
        self._text += piece
        self.history.update_message(self._answer_id, self._text)
        if self._answer is not None:
            self._answer.append(piece)
            self.view.follow()

    def _finished(self, stats: Stats, text: str) -> None:
        status = "stopped" if stats.finish_reason == "cancelled" else "complete"
        data = asdict(stats)
        self.history.update_message(self._answer_id, text, status, data)
        if self._answer is not None:
            self._answer.set_text(text)
            self._answer.set_status(status, data)
        self.view.set_context_use(stats.prompt_tokens + stats.completion_tokens,
                                  self.context_size or stats.prompt_tokens)
        if stats.truncated:
            self.view.show_banner("The conversation no longer fits the model's context: the "
                                  "earliest turns were dropped for this answer. Start a new "
                                  "chat or raise the context length in Settings.")
        self._end()

    def _failed(self, message: str, kind: str, text: str) -> None:
        model = self.task.model if self.task is not None else self.model
        self.history.update_message(self._answer_id, text, "error")
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
        self.busy_changed.emit(False)

    def _banner_action(self, action: str) -> None:
        if action == "Retry":
            self.regenerate()
        elif action == "Dismiss":
            self.view.show_banner("")
