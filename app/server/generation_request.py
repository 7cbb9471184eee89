"""API fields -> Ember's GenerationRequest, for both API dialects."""

from __future__ import annotations

from dataclasses import replace

from app.server.schemas import MAX_TOKENS_LIMIT, SpeculativeOptions
from backends.base import GenerationRequest, Message, SamplingParams, SpeculativeParams

DEFAULTS = SamplingParams()


def sampling(*, temperature: float | None = None, top_p: float | None = None,
             top_k: int | None = None, min_p: float | None = None,
             repeat_penalty: float | None = None, seed: int | None = None,
             stop: str | list[str] | None = None, max_tokens: int | None = None) -> SamplingParams:
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    return SamplingParams(
        temperature=DEFAULTS.temperature if temperature is None else temperature,
        top_p=DEFAULTS.top_p if top_p is None else top_p,
        top_k=DEFAULTS.top_k if top_k is None else top_k,
        min_p=DEFAULTS.min_p if min_p is None else min_p,
        repeat_penalty=DEFAULTS.repeat_penalty if repeat_penalty is None else repeat_penalty,
        seed=seed, stop=stops,
        # bounded: a request never asks for more than MAX_TOKENS_LIMIT tokens
        max_tokens=min(max_tokens or MAX_TOKENS_LIMIT, MAX_TOKENS_LIMIT))


def chat_request(messages: list[tuple[str, str]], params: SamplingParams,
                 json_mode: bool = False, json_schema: dict | None = None) -> GenerationRequest:
    return GenerationRequest(
        messages=tuple(Message("system" if role == "developer" else role, text)
                       for role, text in messages),
        sampling=params, json_mode=json_mode or json_schema is not None, json_schema=json_schema)


def completion_request(prompt: str, params: SamplingParams, json_mode: bool = False,
                       json_schema: dict | None = None) -> GenerationRequest:
    return GenerationRequest(prompt=prompt, sampling=params,
                             json_mode=json_mode or json_schema is not None,
                             json_schema=json_schema)


def with_speculative(request: GenerationRequest,
                     options: SpeculativeOptions | None) -> GenerationRequest:
    if options is None:
        return request
    return replace(request, speculative=SpeculativeParams(
        method=options.method, draft_model=options.draft_model, max_draft=options.max_draft,
        adaptive=options.adaptive))
