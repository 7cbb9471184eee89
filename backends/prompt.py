"""What every local backend does the same way: fit a request's prompt into the context, and
run one request alone through the batched submit/step interface."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from backends.base import (
    Admission,
    Admitted,
    Backend,
    CancelFlag,
    DoneEvent,
    ErrorEvent,
    Event,
    GenerationRequest,
    PromptTooLong,
)
from backends.chat_format.base import OutputParser
from backends.chat_format.render import ChatTemplate
from backends.errors import InvalidRequestError

# The most room a prompt must leave for its answer. max_tokens is a ceiling (coding agents
# send 32000 to every model), so a prompt that fits with this much room is taken whole, and
# the answer stops with the length reason if it fills the context.
ANSWER_ROOM_MAX = 4096


def answer_room(n_ctx: int, max_tokens: int | None) -> int:
    """Tokens of the context kept free for the answer: max_tokens (else a quarter of the
    context), at most ANSWER_ROOM_MAX and half the context, at least one."""
    return max(1, min(max_tokens or n_ctx // 4, ANSWER_ROOM_MAX, n_ctx // 2))


def prompt_limit(n_ctx: int, max_tokens: int | None) -> int:
    """The longest prompt a context of `n_ctx` tokens takes with room for the answer."""
    return n_ctx - answer_room(n_ctx, max_tokens)


def admit(request: GenerationRequest, prompt_tokens: int, n_ctx: int,
          cached_tokens: int = 0) -> Admission:
    """A request that may not be cut (`truncate` False: every API route) whose prompt does
    not fit the context with room for its answer is PromptTooLong, never cut; any other is
    Admitted."""
    limit = prompt_limit(n_ctx, request.sampling.max_tokens)
    if not request.truncate and prompt_tokens > limit:
        return PromptTooLong(prompt_tokens, limit, n_ctx)
    return Admitted(prompt_tokens, cached_tokens)


def fit_prompt(request: GenerationRequest, n_ctx: int, encode: Callable[[str], list[int]],
               render: Callable[[tuple], str]) -> tuple[list[int], bool]:
    """The prompt as tokens, and whether something had to be dropped to fit the context.

    A request that may not be cut (`truncate` False) gets its whole prompt: whether it fits
    is admit's question. Otherwise a conversation loses its oldest turns after
    the system prompt, one at a time, until it fits with room to answer; the last message
    is always kept. A raw prompt keeps its end.
    """
    limit = prompt_limit(n_ctx, request.sampling.max_tokens)
    if request.prompt is not None:
        tokens = encode(request.prompt)
        if not request.truncate or len(tokens) <= limit:
            return tokens, False
        return tokens[-limit:], True
    messages = list(request.messages or ())
    truncated = False
    while True:
        tokens = encode(render(tuple(messages)))
        if not request.truncate or len(tokens) <= limit:
            return tokens, truncated
        first = 1 if messages[0].role == "system" else 0
        if len(messages) - first <= 1:
            raise InvalidRequestError(
                f"the last message alone is {len(tokens)} tokens; with room for the answer "
                f"the context ({n_ctx} tokens) holds {limit}: shorten it or load the model "
                "with a larger context")
        del messages[first]
        truncated = True


def chat_prompt(request: GenerationRequest, n_ctx: int, encode: Callable[[str], list[int]],
                chat: ChatTemplate) -> tuple[list[int], bool, OutputParser]:
    """`fit_prompt` through the model's chat template, and the parser of the answer."""
    rendered: list[str] = []

    def render(messages: tuple) -> str:
        rendered.append(chat.render(messages, request))
        return rendered[-1]

    tokens, truncated = fit_prompt(request, n_ctx, encode, render)
    return tokens, truncated, chat.parser(request, rendered[-1] if rendered else None)


def count_prompt(request: GenerationRequest, encode: Callable[[str], list[int]],
                 chat: ChatTemplate) -> int:
    """How many tokens the request's whole prompt is: the `prompt_tokens` its generation
    reports whenever it fits the context (fit_prompt drops nothing then)."""
    if request.prompt is not None:
        return len(encode(request.prompt))
    return len(encode(chat.render(request.messages or (), request)))


def run_alone(backend: Backend, request: GenerationRequest,
              cancelled: CancelFlag | None = None) -> Iterator[Event]:
    """One request's events (the backend's other requests, if any, advance too)."""
    stream_id = f"solo-{request.id}-{random.randrange(2**32)}"
    verdict = backend.submit(stream_id, request, cancelled)
    if isinstance(verdict, PromptTooLong):
        raise InvalidRequestError(verdict.message)
    while True:
        for sid, event in backend.step():
            if sid != stream_id:
                continue
            yield event
            if isinstance(event, DoneEvent | ErrorEvent):
                return
