"""What a model name in a request may be, once for the check and the OpenAPI document: the
schema states the same pattern the routes enforce, so a client (or a fuzzer) that follows the
schema is never refused for the name's form, only told 404 for a model that is not there.

A name is a local id with an optional :QUANT, never a path; or a remote model, NAME/model,
whose model part is the remote server's own id (which may hold "/" and ":"); or, to pull, a
Hugging Face repo as Ollama writes one, hf.co/OWNER/REPO[:QUANT]. A dot is never
doubled ("..", a path's way up): each dot must be followed by another character, which the
pattern says without a look-ahead, so pydantic's (Rust) regex engine, JSON Schema's ECMA
dialect and Python's re all read it alike.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

_LOCAL = r"[A-Za-z0-9](?:\.?[A-Za-z0-9_-]){0,127}(?::[A-Za-z0-9_-](?:\.?[A-Za-z0-9_-]){0,31})?"
_REMOTE = r"[a-z0-9][a-z0-9_-]{0,31}/[A-Za-z0-9_:@/+-](?:\.?[A-Za-z0-9_:@/+-]){0,159}"
# any Hugging Face repo, as Ollama names one: hf.co/OWNER/REPO[:QUANT] (to pull it, and
# then to use the model pulled by that name)
_HUB_PART = r"[A-Za-z0-9](?:\.?[A-Za-z0-9_-]){0,95}"
_HUB = (rf"(?:hf\.co|huggingface\.co)/{_HUB_PART}/{_HUB_PART}"
        r"(?::[A-Za-z0-9_-](?:\.?[A-Za-z0-9_-]){0,63})?")
PATTERN = rf"^(?:{_LOCAL}|{_REMOTE}|{_HUB})$"
LOCAL_PATTERN = rf"^{_LOCAL}$"
_NAME = re.compile(PATTERN)
_LOCAL_NAME = re.compile(LOCAL_PATTERN)
MAX_LENGTH = 200


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a model name, or None when it can."""
    if len(name) <= MAX_LENGTH and _NAME.match(name):
        return None
    return (f"invalid model name {name[:80]!r}: use an id such as "
            "qwen2.5-coder-0.5b-instruct or id:QUANT, or REMOTE/model")


def _checked(name: str) -> str:
    problem = name_problem(name)
    if problem is not None:
        raise PydanticCustomError("model_name", problem)
    return name


def _checked_local(name: str) -> str:
    name = _checked(name)
    if not _LOCAL_NAME.match(name):
        raise PydanticCustomError("model_name", f"{name[:80]} is a remote model: tokenizing "
                                  "and embeddings run on local models only")
    return name


# The `model` field of every request that names one.
ModelName = Annotated[str, Field(max_length=MAX_LENGTH, json_schema_extra={"pattern": PATTERN}),
                      AfterValidator(_checked)]
# Routes that run on local models only (tokenizing, embeddings).
LocalModelName = Annotated[str, Field(max_length=MAX_LENGTH,
                                      json_schema_extra={"pattern": LOCAL_PATTERN}),
                           AfterValidator(_checked_local)]
