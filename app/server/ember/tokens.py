"""llama-server's /tokenize and /detokenize, with Ember's `model` (optional while one model is
loaded, as llama-server serves one): the loaded model's own tokenizer, through its worker."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from app.server.bridge import check_model_name
from app.server.errors import ApiError
from app.server.model_name import LocalModelName
from backends.errors import InvalidRequestError

router = APIRouter(tags=["ember"])

MAX_TOKENS_IN = 1 << 20  # ids in one /detokenize request


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: LocalModelName | None = Field(None, description="the loaded model if omitted and "
                                    "only one is loaded")
    content: str
    with_pieces: bool = False  # each token with its text


class TokenPiece(BaseModel):
    id: int
    piece: str  # the token's text; bytes that are not whole UTF-8 characters show as U+FFFD


class TokenizeResponse(BaseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: LocalModelName | None = None
    tokens: list[int] = Field(max_length=MAX_TOKENS_IN)


class DetokenizeResponse(BaseModel):
    content: str


def _model(request: Request, name: str | None) -> str:
    """The request's model, or the one loaded model; a remote model's tokenizer is its
    server's business."""
    runtime = request.app.state.runtime
    if name is None:
        loaded = [m.model.ref for m in runtime.loaded()]
        if not loaded:  # no model to stand for the one left out: not there (404)
            raise ApiError(404, "no model is loaded: name the model to tokenize with",
                           "model", code="model_not_found")
        if len(loaded) > 1:
            raise InvalidRequestError(f"name the model: {len(loaded)} models are loaded "
                                      f"({', '.join(loaded)})", "model")
        name = loaded[0]
    name = check_model_name(name)
    if runtime.is_remote(name):
        raise InvalidRequestError(f"{name} is a remote model: ask its server to tokenize",
                                  "model")
    return name


@router.post("/tokenize", response_model=TokenizeResponse,
             responses={400: {}, 401: {}, 404: {}, 500: {}})
async def tokenize(body: TokenizeRequest, request: Request) -> TokenizeResponse:
    """The text as the model's token ids: special-token text (`<|im_start|>`) as those
    tokens, no BOS added."""
    runtime = request.app.state.runtime
    model = _model(request, body.model)
    await anyio.to_thread.run_sync(runtime.check_model, model)
    tokens = await anyio.to_thread.run_sync(runtime.tokenize, model, body.content)
    if not body.with_pieces:
        return TokenizeResponse(tokens=tokens)
    pieces = await anyio.to_thread.run_sync(runtime.detokenize, model, [[t] for t in tokens])
    return TokenizeResponse(tokens=[TokenPiece(id=t, piece=p)
                                    for t, p in zip(tokens, pieces, strict=True)])


@router.post("/detokenize", response_model=DetokenizeResponse,
             responses={400: {}, 401: {}, 404: {}, 500: {}})
async def detokenize(body: DetokenizeRequest, request: Request) -> DetokenizeResponse:
    """Token ids as the model's text (control tokens as their text)."""
    runtime = request.app.state.runtime
    model = _model(request, body.model)
    await anyio.to_thread.run_sync(runtime.check_model, model)
    texts = await anyio.to_thread.run_sync(runtime.detokenize, model, [body.tokens])
    return DetokenizeResponse(content=texts[0])
