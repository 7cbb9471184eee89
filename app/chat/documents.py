"""What of a chat's documents goes with a question: the model is loaded (as the answer will
load it), the conversation counted, and the documents put in whole when they fit with room to
answer, else the best pieces (embedded and retrieved; that needs the embedding model).

app.documents is imported where it is used: a front end's other parts never wait on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.chat.request import TurnOptions
from app.config import Paths
from app.runtime import Runtime
from backends.base import GenerationRequest
from backends.errors import EmberError

if TYPE_CHECKING:
    from app.documents.context import DocumentContext
    from app.documents.embedder import Embedder
    from app.documents.library import DocumentLibrary

# A remote server keeps its context and its tokenizer to itself: documents get this many
# tokens, counted at CHARS_PER_TOKEN (English prose and code average 3.5-4 characters a token
# in the BPE vocabularies of today's models; 3 leaves a margin for other languages).
REMOTE_DOCUMENT_TOKENS = 4096
CHARS_PER_TOKEN = 3
# The room kept for the answer: the chat's max_tokens, but never more than a quarter of the
# context, so documents still go in when max_tokens is set as high as the context itself.
ANSWER_SHARE = 4
MIN_DOCUMENT_TOKENS = 64  # less than this cannot hold one useful piece


class NoRoomError(EmberError):
    pass


class MissingEmbedderError(EmberError):
    """The documents need the embedding model, which is not installed."""

    def __init__(self, message: str, model: str) -> None:
        super().__init__(message)
        self.model = model


@dataclass(frozen=True)
class Budget:
    context: int  # the model's context (tokens)
    conversation: int  # the conversation's prompt so far
    answer: int  # kept for the answer

    @property
    def documents(self) -> int:
        return self.context - self.conversation - self.answer


def budget_for(context: int, conversation: int, max_tokens: int) -> Budget:
    """What is left for the documents; NoRoomError says why when it is too little."""
    budget = Budget(context, conversation, min(max_tokens, context // ANSWER_SHARE))
    if budget.documents < MIN_DOCUMENT_TOKENS:
        raise NoRoomError(
            f"no room for the documents: the conversation takes {conversation:,} of the "
            f"model's {context:,} tokens of context and {budget.answer:,} are kept for the "
            "answer. Start a new chat with the documents, or raise the context length in "
            "Settings.")
    return budget


def embedder_of(runtime: Runtime, home: Paths | None) -> tuple[Embedder | None, str]:
    """The embedding model when it is installed, else None and its name (documents that fit
    whole need none)."""
    from app.documents.embedder import RuntimeEmbedder, embedding_model_setting

    ref = embedding_model_setting(home)
    try:
        runtime.store.get(ref)
    except EmberError:
        return None, ref
    return RuntimeEmbedder(runtime, ref), ""


def choose_documents(runtime: Runtime, library: DocumentLibrary, conversation_id: int,
                     question: str, model: str, request: GenerationRequest,
                     options: TurnOptions, home: Paths | None = None,
                     progress: Callable[[str], None] = lambda line: None,
                     loaded: Callable[[object], None] = lambda lm: None) -> DocumentContext:
    """The chat's documents for `question` in `request`'s conversation. EmberError says why
    they cannot be used (MissingEmbedderError: the embedding model is needed)."""
    embedder, missing = embedder_of(runtime, home)
    try:
        budget, count = _budget(runtime, model, request, options, progress, loaded)
        return library.context_for(conversation_id, question, budget.documents, count,
                                   embedder, progress)
    except MissingEmbedderError:
        raise
    except EmberError as e:
        if missing:  # the front end offers the download with the reason
            raise MissingEmbedderError(str(e), missing) from e
        raise


def _budget(runtime: Runtime, model: str, request: GenerationRequest, options: TurnOptions,
            progress: Callable[[str], None], loaded: Callable[[object], None]
            ) -> tuple[Budget, Callable[[str], int]]:
    if runtime.is_remote(model):
        def estimate(text: str) -> int:
            return len(text) // CHARS_PER_TOKEN + 1
        return Budget(REMOTE_DOCUMENT_TOKENS, 0, 0), estimate
    progress(f"Loading {model}…")
    lm = runtime.load(model, options.context, options.backend, options.gpu_layers,
                      quant=options.quant, kv_cache=options.kv_cache)
    loaded(lm)
    progress("Counting the conversation…")
    conversation = runtime.count_prompt_tokens(model, request, options.backend)

    def count(text: str) -> int:
        return len(runtime.tokenize(model, text))
    # None: until the context is full; the answer keeps a quarter of it (budget_for)
    max_tokens = request.sampling.max_tokens or lm.plan.context
    return budget_for(lm.plan.context, conversation, max_tokens), count
