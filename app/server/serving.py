"""What a request asks of the model that serves it, checked before a response starts: an
answer that fits in the model's context, and forced tool calls only on a backend that can
enforce them. The request's own rules (tool schemas, tool turns) are
GenerationRequest.validate's; these need to know the model and its backend (Runtime.serving).
"""

from __future__ import annotations

from app.runtime.runtime import Serving
from backends.base import GenerationRequest
from backends.errors import InvalidRequestError


def check_serving(request: GenerationRequest, serving: Serving, model: str,
                  max_tokens_param: str = "max_tokens") -> None:
    wanted = request.sampling.max_tokens
    if wanted is not None and wanted > serving.context:
        how = "as loaded" if serving.loaded else f"as the {serving.backend} backend loads it"
        raise InvalidRequestError(
            f"{max_tokens_param} is {wanted}, more than the context of {model} {how} "
            f"({serving.context} tokens, prompt included): ask for at most {serving.context}, "
            "or load the model with a larger context", max_tokens_param)
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
