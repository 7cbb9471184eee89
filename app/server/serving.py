"""What a request asks of the model that serves it, checked before a response starts:
forced tool calls only on a backend that can enforce them, logprobs only where a backend
reports them, images and audio only for a model with a projector on a backend that takes
them. The request's own rules (tool schemas, tool turns) are
GenerationRequest.validate's; these need to know the model and its backend (Runtime.serving).
"""

from __future__ import annotations

from app.runtime.runtime import Serving
from backends.base import GenerationRequest, media_of
from backends.errors import InvalidRequestError
from backends.media import image_tokens_note


def check_serving(request: GenerationRequest, serving: Serving, model: str) -> None:
    """`max_tokens` is not checked here: on every dialect it is a ceiling, not a demand (as
    on OpenAI's and Anthropic's APIs, llama-server and LM Studio). An answer stops when the
    context is full, with the dialect's length reason; coding agents ask for 32k ceilings
    of any model (Claude Code always does)."""
    check_media(request, serving, model)
    choice = request.tool_choice
    if request.tools and choice.mode in ("required", "function") \
            and not serving.capabilities.grammar:
        # Without constrained decoding a forced call is only a wish: refuse rather than
        # answer with text that breaks the client's agent loop.
        forced = "required" if choice.mode == "required" else f"naming {choice.name!r}"
        raise InvalidRequestError(
            f"tool_choice {forced} needs constrained decoding to guarantee the call, and the "
            f"{serving.backend} backend that runs {model} has none: use tool_choice \"auto\", "
            "or run the model on a backend that constrains decoding", "tool_choice")
    if request.logprobs is not None and not serving.capabilities.logprobs:
        raise InvalidRequestError(
            f"the {serving.backend} backend that runs {model} does not report logprobs yet: "
            "ask without them, or run the model on a local backend (llamacpp, mlx or cuda)",
            "logprobs")


def check_media(request: GenerationRequest, serving: Serving, model: str) -> None:
    """A request with images or audio needs a model that has a projector (its mmproj file)
    and a backend that runs one."""
    media = media_of(request)
    if not media:
        return
    what = image_tokens_note(media)
    if not serving.projector:
        raise InvalidRequestError(
            f"model {model} reads text only: it has no vision projector (mmproj), so it cannot "
            f"take the request's {what}; send text, or use a model that sees (or hears, for "
            "audio)")
    if not serving.capabilities.media:
        raise InvalidRequestError(
            f"the {serving.backend} backend that runs {model} does not take images or audio "
            f"(the request has {what}): run it on the llamacpp backend")
