"""The request fields every API dialect shares: Ember's `speculative` extension and the
wire's bound on token counts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from backends.base import MAX_DRAFT

# A sanity bound for token counts on the wire; the real one is the model's context, which
# only the Runtime knows (app.server.serving checks it once the model is known).
TOKEN_COUNT_MAX = 2**31 - 1


class SpeculativeOptions(BaseModel):
    """Ember's extension: speculative decoding for this request (see backends.base)."""
    model_config = ConfigDict(extra="forbid")
    method: Literal["draft", "lookup"] = "draft"
    draft_model: str | None = Field(None, max_length=200)
    max_draft: int = Field(8, ge=1, le=MAX_DRAFT)
    adaptive: bool = True  # False: always propose max_draft tokens (benchmarks, tests)
