"""One conversation's turns, apart from any window or terminal: a question is stored, the
request assembled from the shown path (app.chat.request), the documents chosen
(app.chat.documents), the tools of the chat's MCP servers listed, the answer streamed from the
Runtime and saved as it grows, its calls answered (app.chat.tools, approval asked through the
front end's callback) and the model asked again, up to the step limit.

Durability, what history.db holds when: every message is stored before anything is generated
for it; an answer is stored "streaming" first and saved with each piece (its thinking too), so
a kill at any moment keeps every earlier message and the partial answer (the next open marks
it "interrupted", app.history); a tool call's message is stored before it runs, with the text
a model would read if Ember stopped there.

Branches: editing a question adds a new version beside it (its parent's child), retrying adds
a new answer beside the old one; both stay, and the shown path is what the model is given.

A turn runs on the caller's thread and blocks until it ends; the front end sees it through
`on_event` (app.chat.events) and answers tool calls through `approve`. stop() (from any thread)
ends it: the answer is saved "stopped", a waiting call is not run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.chat.attachments import (
    Attachment,
    attachment_from_bytes,
    attachment_from_file,
    cannot_see_text,
    decode_stored,
    model_sees,
    seeing_models,
)
from app.chat.events import (
    AnswerDone,
    AnswerStarted,
    ChatError,
    ChatEvent,
    Decision,
    Loaded,
    MediaRefused,
    Notice,
    PromptCounted,
    Saved,
    Status,
    TextDelta,
    ThinkingDelta,
    ThinkingEnded,
    ToolCallAsked,
)
from app.chat.policy import DROP_OLD_TURNS, ContextPolicy
from app.chat.request import MediaLoader, TurnOptions, build_request, title_from
from app.chat.tools import Approve, ChatTools, Offered, list_tools, run_round
from app.config import Paths
from app.history import LEAF, History, HistoryError, Leaf, StoredMedia, StoredMessage
from app.mcp.tool_loop import STEP_LIMIT, call_key, next_step, step_limit_note
from app.runtime import Runtime
from app.runtime.generation import Generation
from app.runtime.thinking import ThinkingSupport
from app.sqlite_file import SqliteFileError
from backends.base import (
    DoneEvent,
    ErrorEvent,
    GenerationRequest,
    ReasoningEvent,
    TokenEvent,
    ToolCall,
    ToolCallEvent,
)
from backends.errors import EmberError
from backends.media import Media, MediaError

if TYPE_CHECKING:
    from app.documents.context import DocumentContext
    from app.documents.library import DocumentLibrary

OnEvent = Callable[[ChatEvent], None]


def deny_all(_asked: ToolCallAsked) -> Decision:
    """For a front end that offers no tools (none is called without its approval)."""
    return "deny"


@dataclass(frozen=True)
class _Again:
    """Ask once more for words, beside the answer that only repeated calls."""
    parent: int | None


@dataclass(frozen=True)
class _Tools:
    """Run these calls, then ask the model again."""
    calls: tuple[ToolCall, ...]
    offered: Offered


_Next = _Again | _Tools | None


class ChatSession:
    """The turns of conversation `conversation_id` in `history`, answered by `model`."""

    def __init__(self, history: History, runtime: Runtime, conversation_id: int,
                 model: str, options: TurnOptions, tools: ChatTools | None = None,
                 library: DocumentLibrary | None = None, home: Paths | None = None,
                 support: ThinkingSupport | None = None,
                 policy: ContextPolicy = DROP_OLD_TURNS, step_limit: int = STEP_LIMIT) -> None:
        self.history, self.runtime, self.conversation_id = history, runtime, conversation_id
        self.model, self.options = model, options
        self.tools, self.library, self.home = tools, library, home
        self.support = support or ThinkingSupport()
        self.policy, self.step_limit = policy, step_limit
        self._stop = threading.Event()
        self._generation: Generation | None = None
        self._turn_lock = threading.Lock()
        self._media: dict[str, Media] = {}  # decoded stored media, by file name

    # what the user does

    def attach(self, source: Path | bytes, on_event: OnEvent, name: str = "pasted image"
               ) -> Attachment | None:
        """An image (or clip) for the next question, from a file or bytes (a paste). None,
        said through `on_event` (MediaRefused), when it cannot be read or the chat's model
        cannot take it (the installed models that can are named)."""
        try:
            attachment = attachment_from_file(source) if isinstance(source, Path) else \
                attachment_from_bytes(source, name)
        except MediaError as e:
            on_event(MediaRefused(f"Not attached: {e}."))
            return None
        if not self.sees():
            seeing = seeing_models(self.runtime.store)
            on_event(MediaRefused(cannot_see_text(self.model, seeing,
                                                  self.runtime.is_remote(self.model)),
                                  tuple(seeing), self.model))
            return None
        return attachment

    def sees(self) -> bool:
        """Whether the chat's model takes images: a local model with a projector beside it
        (a model not installed here is let through: loading it says what is wrong); a
        remote one unless its server lists capabilities without vision (one that lists none,
        vLLM's or OpenAI's, gets the images as content parts and says if it cannot see)."""
        if self.runtime.is_remote(self.model):
            return self.runtime.remote_sees(self.model) is not False
        return model_sees(self.runtime.store, self.model) is not False

    def ask(self, text: str, edit_of: StoredMessage | None = None,
            attachments: tuple[Attachment, ...] | None = None) -> StoredMessage:
        """Store a question, with its images: at the end of the shown path, or (`edit_of`)
        as a new version beside that question, which keeps its images unless `attachments`
        are given. The first question names the conversation."""
        kept = edit_of.media if edit_of is not None and attachments is None else ()
        attachments = attachments or ()
        if not text.strip() and not attachments and not kept:
            raise EmberError("the message is empty")
        conv = self.history.get(self.conversation_id)
        if not any(m.role == "user" for m in self.history.messages(conv.id)):
            self.history.rename(conv.id, title_from(text) if text.strip() else
                                f"Image: {attachments[0].name}" if attachments else "Image")
        self.history.set_model(conv.id, self.model)
        parent = edit_of.parent_id if edit_of is not None else LEAF
        media = kept + tuple(self.history.store_media(a.data, a.kind, a.ext)
                             for a in attachments)
        for a, stored in zip(attachments, media[len(kept):], strict=True):
            self._media[stored.name] = a.media  # decoded once: the answer reuses it
        return self.history.add_message(conv.id, "user", text, parent_id=parent, media=media)

    def send(self, text: str, on_event: OnEvent, approve: Approve = deny_all,
             edit_of: StoredMessage | None = None,
             attachments: tuple[Attachment, ...] | None = None) -> None:
        """Ask `text` (a new version of `edit_of`, when given) and answer it."""
        question = self.ask(text, edit_of, attachments)
        self.answer(question.content, on_event, approve)

    def edit_last(self, text: str, on_event: OnEvent, approve: Approve = deny_all,
                  attachments: tuple[Attachment, ...] | None = None) -> None:
        """A new version of the last question, answered (the old one and its answers stay);
        it keeps the old one's images unless `attachments` are given."""
        last = self.last_question()
        if last is None:
            raise EmberError("there is no message to edit yet")
        self.send(text, on_event, approve, edit_of=last, attachments=attachments)

    def load_media(self, stored: StoredMedia) -> Media:
        """A stored image or clip decoded (once per session); HistoryError or MediaError
        when its file is missing or damaged."""
        media = self._media.get(stored.name)
        if media is None:
            data = self.history.read_media(stored)
            media = decode_stored(stored.kind, data, f"the stored {stored.kind} "
                                                     f"{stored.name[:12]}")
            self._media[stored.name] = media
        return media

    def last_question(self) -> StoredMessage | None:
        return next((m for m in reversed(self.history.messages(self.conversation_id))
                     if m.role == "user"), None)

    def retry(self, on_event: OnEvent, approve: Approve = deny_all) -> None:
        """A new version of the last answer beside the old one (a question left unanswered
        is answered). The same documents as the old answer are given."""
        messages = self.history.messages(self.conversation_id)
        if messages and messages[-1].role == "user":
            self.answer(messages[-1].content, on_event, approve)
            return
        last = next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].role == "assistant"), None)
        if last is None:
            raise EmberError("there is no answer to retry yet")
        question = next((m.content for m in reversed(messages[:last]) if m.role == "user"), "")
        self.answer(question, on_event, approve, replaced_answer=messages[last].id,
                    parent=messages[last].parent_id)

    def stop(self) -> None:
        """End the turn being made (from any thread)."""
        self._stop.set()
        generation = self._generation
        if generation is not None:
            generation.cancel()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # one turn

    def answer(self, question: str, on_event: OnEvent, approve: Approve = deny_all,
               replaced_answer: int | None = None, parent: int | None | Leaf = LEAF) -> None:
        """Answer below `parent` (the shown path's end by default; a retried answer goes
        beside the old one), through as many tool rounds as the model asks for."""
        with self._turn_lock:
            self._stop.clear()
            _Turn(self, on_event, approve).run(question, replaced_answer, parent)


class _Turn:
    """The state of one turn: the documents given, the tool rounds run."""

    def __init__(self, session: ChatSession, on_event: OnEvent, approve: Approve) -> None:
        self.s, self.emit, self.approve = session, on_event, approve
        self.context: DocumentContext | None = None
        self.steps = 0
        self.failed_servers: dict[str, str] = {}  # tried again at the next message
        self.calls_made: set[tuple[str, str]] = set()
        self.asked_for_words = False
        self.save_failed = False
        self.thinking_since: float | None = None  # when the answer's thinking began
        self.thinking_s: float | None = None  # how long it thought (ended by the answer)
        self.media_said = False  # a note on images the model is not given, said once

    def media_loader(self) -> MediaLoader | None:
        """How the request gets the conversation's images: None for a model that cannot
        take them (it is told in words, and the front end is told once which models can);
        a file that cannot be read is left out, said once."""
        s = self.s
        has_media = any(m.media for m in s.history.messages(s.conversation_id))
        if not has_media:
            return None
        if not s.sees():
            if not self.media_said:
                self.media_said = True
                seeing = seeing_models(s.runtime.store)
                self.emit(MediaRefused(
                    cannot_see_text(s.model, seeing, s.runtime.is_remote(s.model))
                    + " This chat's images are left out of its answers.", tuple(seeing),
                    s.model))
            return None

        def load(stored: StoredMedia) -> Media | None:
            try:
                return s.load_media(stored)
            except (HistoryError, MediaError) as e:
                if not self.media_said:
                    self.media_said = True
                    self.emit(Notice(f"An image is left out of this answer: {e}", "media"))
                return None
        return load

    def run(self, question: str, replaced_answer: int | None, parent: int | None | Leaf
            ) -> None:
        if not self._documents(question, replaced_answer):
            return
        answer_only = False
        while not self.s.stopped:
            step = self._answer(parent, answer_only)
            if isinstance(step, _Again):
                parent, answer_only = step.parent, True
            elif isinstance(step, _Tools) and self.s.tools is not None:
                self.steps += 1
                self.calls_made.update(call_key(c) for c in step.calls)
                if not run_round(step.calls, step.offered, self.s.tools, self.s.history,
                                 self.s.conversation_id, self.approve, self.emit,
                                 lambda: self.s.stopped):
                    return
                parent, answer_only = LEAF, False
            else:
                return

    def _documents(self, question: str, replaced_answer: int | None) -> bool:
        """Choose the documents of this turn; False: they could not be used (said)."""
        library = self.s.library
        if library is None or not library.documents(self.s.conversation_id):
            return True
        used = library.used_by(replaced_answer) if replaced_answer is not None else None
        if used is not None:
            self.context = used
            return True
        from app.chat.documents import MissingEmbedderError, choose_documents

        s = self.s
        request = build_request(s.history.get(s.conversation_id),
                                s.history.messages(s.conversation_id), s.options, s.support,
                                policy=s.policy, media=self.media_loader())
        try:
            self.context = choose_documents(
                s.runtime, library, s.conversation_id, question, s.model, request, s.options,
                s.home, lambda line: self.emit(Status(line)),
                lambda lm: self.emit(Loaded(lm.plan.context)))  # type: ignore[attr-defined]
        except MissingEmbedderError as e:
            self.emit(ChatError(str(e), "documents", missing_embedder=e.model))
            return False
        except EmberError as e:
            self.emit(ChatError(str(e), "documents"))
            return False
        except Exception as e:  # a bug must not leave the front end waiting forever
            self.emit(ChatError(f"{type(e).__name__}: {e}", "documents"))
            return False
        finally:
            self.emit(Status(""))
        return True

    def _offered(self) -> Offered | None:
        """The tools of the chat's MCP servers (started or reused), problems said."""
        s = self.s
        on = s.history.mcp_servers(s.conversation_id) if s.tools is not None else ()
        if not on or s.tools is None:
            return None
        servers, error = s.tools.servers_or_error()
        if error:
            self.emit(Notice(f"MCP tools are off for this answer: {error}", "tools"))
        wanted = {n: servers[n] for n in on if n in servers and n not in self.failed_servers}
        if not wanted:
            self._problems(None)
            return None
        offered, failed = list_tools(s.tools, wanted)
        self.failed_servers.update(failed)
        self._problems(offered)
        return offered

    def _problems(self, offered: Offered | None) -> None:
        problems = list(self.failed_servers.values())
        if offered is not None:
            problems += [f"tool {name} left out: {why}"
                         for name, why in offered.index.problems.items()]
        if problems:
            self.emit(Notice(" · ".join(problems), "tools"))

    def _save(self, message_id: int, text: str, status: str | None = None,
              stats: dict | None = None, reasoning: str | None = None,
              tool_calls: tuple[ToolCall, ...] | None = None) -> None:
        try:
            self.s.history.update_message(message_id, text, status, stats,
                                          reasoning=reasoning, tool_calls=tool_calls)
        except SqliteFileError as e:  # the answer goes on in the front end, said once
            if not self.save_failed:
                self.save_failed = True
                self.emit(Notice(f"This answer is not being saved: {e}", "save"))

    def _answer(self, parent: int | None | Leaf, answer_only: bool) -> _Next:
        """One answer; what comes next (None: the turn ended)."""
        s = self.s
        offered = self._offered()
        if s.stopped:  # stopped while the servers started: no answer is begun
            return None
        try:
            answer = s.history.add_message(s.conversation_id, "assistant", "",
                                           status="streaming", model=s.model,
                                           parent_id=parent)
        except SqliteFileError as e:
            self.emit(ChatError(f"No answer: the chat could not be saved. {e}", "save"))
            return None
        request = build_request(s.history.get(s.conversation_id),
                                s.history.messages(s.conversation_id), s.options, s.support,
                                offered.index.request_tools() if offered else (),
                                self.context.prompt_text if self.context else "",
                                answer_only, s.policy, self.media_loader())
        remote = s.runtime.is_remote(s.model)
        if self.context is not None and s.library is not None:
            s.library.record_use(answer.id, self.context)
        loading = not remote and not any(lm.model.ref == s.model for lm in s.runtime.loaded())
        self.emit(AnswerStarted(answer.id, tuple(p.citation() for p in self.context.pieces)
                                if self.context else (), loading, request))
        o = s.options
        try:
            if not remote:
                lm = s.runtime.load(s.model, o.context, o.backend, o.gpu_layers,
                                    quant=o.quant, kv_cache=o.kv_cache)
                self.emit(Loaded(lm.plan.context))
            else:
                self.emit(Loaded(0))
        except Exception as e:  # a bug must not leave the front end waiting
            why = str(e) if isinstance(e, EmberError) else f"{type(e).__name__}: {e}"
            self._save(answer.id, "", "error")
            self.emit(ChatError(why, "load", model=s.model))
            return None
        return self._stream(answer, request, offered, remote)

    def _stream(self, answer: StoredMessage, request: GenerationRequest,
                offered: Offered | None, remote: bool) -> _Next:
        s = self.s
        text = reasoning = ""
        self.thinking_since = self.thinking_s = None
        end_thinking = self._end_thinking
        done: DoneEvent | None = None
        error: tuple[str, str] | None = None
        try:
            # one Runtime call: the worker renders and tokenizes the prompt once and is
            # admitted with its count (the context meter's), or the context policy applies
            generation = s.runtime.generate(s.model, request) if remote else \
                s.runtime.submit(s.model, request, backend=s.options.backend)
            s._generation = generation
            if generation.admitted is not None:
                self.emit(PromptCounted(generation.admitted.prompt_tokens))
            if s.stopped:
                generation.cancel()
            for event in generation:
                if isinstance(event, TokenEvent):
                    end_thinking()
                    text += event.text
                    self._save(answer.id, text)
                    self.emit(TextDelta(event.text))
                elif isinstance(event, ReasoningEvent):
                    if self.thinking_since is None:
                        self.thinking_since = time.monotonic()
                    reasoning += event.text
                    self._save(answer.id, text, reasoning=reasoning)
                    self.emit(ThinkingDelta(event.text))
                elif isinstance(event, ToolCallEvent):
                    end_thinking()  # the calls are shown whole, when the answer ends
                elif isinstance(event, DoneEvent):
                    done = event
                    break
                elif isinstance(event, ErrorEvent):
                    error = (event.message, event.kind)
                    break
            else:
                error = ("the answer ended without a result", "backend")
        except EmberError as e:
            error = (str(e), "backend")
        except Exception as e:
            error = (f"{type(e).__name__}: {e}", "backend")
        finally:
            s._generation = None
        if done is None:
            message, kind = error or ("the answer ended without a result", "backend")
            end_thinking(stopped=True)
            self._save(answer.id, text, "error", reasoning=reasoning)
            self.emit(Saved(answer.id, "error"))
            self.emit(ChatError(message, kind, text, s.model))
            return None
        return self._finished(answer, done, offered)

    def _end_thinking(self, stopped: bool = False) -> None:
        """The answer (or a call, or the end) came: the thinking ends, timed."""
        if self.thinking_since is not None and self.thinking_s is None:
            self.thinking_s = time.monotonic() - self.thinking_since
            self.emit(ThinkingEnded(self.thinking_s, stopped))

    def _finished(self, answer: StoredMessage, done: DoneEvent, offered: Offered | None
                  ) -> _Next:
        s = self.s
        stats = done.stats
        status = "stopped" if stats.finish_reason == "cancelled" else "complete"
        calls = done.tool_calls if status == "complete" and offered is not None and \
            offered.index.by_name else ()
        self._end_thinking(stopped=status == "stopped")
        data = asdict(stats)
        if self.context is not None:  # the citations travel with the answer (export)
            data["sources"] = [p.citation() for p in self.context.pieces]
        if done.reasoning:
            data["thinking_s"] = round(self.thinking_s or 0.0, 2)
        self._save(answer.id, done.text, status, data, reasoning=done.reasoning,
                   tool_calls=done.tool_calls)
        step = next_step(calls, self.calls_made, self.asked_for_words, self.steps,
                         s.step_limit)
        note = step_limit_note(s.step_limit) if step == "step_limit" else ""
        self.emit(Saved(answer.id, status))
        self.emit(AnswerDone(answer.id, done.text, status, data, done.reasoning,
                             done.tool_calls, note))
        truncated = s.policy.note(stats.truncated)
        if truncated:
            self.emit(Notice(truncated, "truncated"))
        if step == "ask_for_words":
            # only calls whose results it has: ask for an answer in words beside this one
            # (once: a model that calls tools even then goes on to the step limit); the
            # repeating answer stays as an earlier version, with its calls not run
            self.asked_for_words = True
            return _Again(answer.parent_id)
        if step == "run" and offered is not None:
            return _Tools(calls, offered)
        return None
