"""What a chat session tells its front end while it makes an answer: dataclasses, each shown
as the front end likes (a widget, a line on the terminal). The session calls its `on_event`
callback with them, in order, from the thread that runs the turn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from backends.base import GenerationRequest

Decision = Literal["approve", "deny", "always"]


@dataclass(frozen=True)
class AnswerStarted:
    """An answer is stored (status "streaming") and about to stream."""
    message_id: int
    sources: tuple[str, ...] = ()  # the citations of the documents it is given
    loading: bool = False  # its model is not loaded yet
    request: GenerationRequest | None = None  # what the model is given for it


@dataclass(frozen=True)
class Loaded:
    context: int  # the model's context (tokens); 0: a remote model's, not known


@dataclass(frozen=True)
class PromptCounted:
    tokens: int


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ThinkingEnded:
    seconds: float
    stopped: bool = False


@dataclass(frozen=True)
class ToolCallAsked:
    """A call waits for the front end's decision (the session's approval callback)."""
    message_id: int
    tool: str  # the name the model called
    server: str
    arguments: str  # as the model wrote them (JSON)


@dataclass(frozen=True)
class ToolCallStarted:
    """A call's tool message is stored (before anything runs)."""
    message_id: int
    stats: dict


@dataclass(frozen=True)
class ToolResult:
    message_id: int
    tool: str
    outcome: str  # ok | error | denied | stopped | running
    text: str  # what the model is given
    seconds: float | None = None
    note: str = ""  # e.g. an "Allow always" that could not be remembered


@dataclass(frozen=True)
class AnswerDone:
    """The answer ended: its final text, status and stats (as stored)."""
    message_id: int
    text: str
    status: str  # complete | stopped
    stats: dict
    reasoning: str = ""
    tool_calls: tuple = ()
    note: str = ""  # the step limit's note, when the loop stopped there


@dataclass(frozen=True)
class Notice:
    """A line for the front end's banner: a server that failed, old turns dropped..."""
    text: str
    kind: str = "info"  # info | truncated | tools | save | media


@dataclass(frozen=True)
class ChatError:
    message: str
    kind: str  # load | crash | invalid | backend | documents | save
    text: str = ""  # the answer so far
    model: str = ""
    missing_embedder: str = ""  # documents that need the embedding model (kind documents)


@dataclass(frozen=True)
class MediaRefused:
    """An image (or clip) that was not attached, or is not given to the chat's model: why,
    and the installed models that can take images (`seeing`), for the front end to offer."""
    text: str
    seeing: tuple[str, ...] = ()
    model: str = ""  # the chat's model, when it is the reason


@dataclass(frozen=True)
class Saved:
    """A message reached history.db in its final state."""
    message_id: int
    status: str


@dataclass(frozen=True)
class Status:
    text: str  # work before the answer ("Loading the model…", "Reading the documents…")


ChatEvent = (AnswerStarted | Loaded | PromptCounted | TextDelta | ThinkingDelta | ThinkingEnded
             | ToolCallAsked | ToolCallStarted | ToolResult | AnswerDone | Notice | ChatError
             | Saved | Status | MediaRefused)
