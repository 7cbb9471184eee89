"""Ollama's request bodies (pydantic), mirroring Ollama's own API (docs/api.md) so its clients
work unchanged. Tool definitions are OpenAI's objects (app.server.openai.schemas.ToolDef)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from app.server.common_schemas import TOKEN_COUNT_MAX, SpeculativeOptions
from app.server.model_name import LocalModelName, ModelName
from app.server.openai.schemas import EmbeddingInput, ToolDef
from backends.base import MAX_TOP_LOGPROBS

# Ollama's `think`: a switch, or a level (gpt-oss takes levels only); "max" is Ollama's
# newest level, which Ember's effort scale tops at "high".
Think = bool | Literal["low", "medium", "high", "max"]


class OllamaOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    repeat_penalty: float | None = Field(None, gt=0, le=10)
    seed: int | None = Field(None, ge=0, lt=2**32)
    num_predict: int | None = Field(None, ge=-2, le=TOKEN_COUNT_MAX)
    backend: str | None = None  # Ember's extension: run a local model on this backend
    num_ctx: int | None = Field(None, ge=256, le=131072)
    stop: list[str] | None = None


class OllamaFunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(max_length=200)
    arguments: dict[str, Any] | str = Field(default_factory=dict)  # an object; JSON text taken
    index: int | None = None


class OllamaToolCall(BaseModel):
    """Ollama's call: arguments as an object; `id` since Ollama 0.12 (older clients and the
    Python library send none)."""
    model_config = ConfigDict(extra="allow")
    id: str | None = Field(None, max_length=200)
    function: OllamaFunctionCall


class OllamaMessage(BaseModel):
    """An assistant turn carries its `thinking` and `tool_calls`; a `tool` turn is the result
    of the tool `tool_name` (and of the call `tool_call_id`, when the client sends it)."""
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    thinking: str | None = None
    tool_calls: list[OllamaToolCall] | None = Field(None, max_length=128)
    tool_name: str | None = Field(None, max_length=200)
    tool_call_id: str | None = Field(None, max_length=200)
    images: list[str] | None = None  # base64 images, before the content (as Ollama has them)


class OllamaError(BaseModel):
    """Ollama's error body."""
    error: str


class OllamaBase(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: ModelName
    stream: bool = True
    format: str | dict[str, Any] | None = None
    options: OllamaOptions | None = None
    speculative: SpeculativeOptions | bool | None = None  # Ember's extension
    keep_alive: str | int | float | None = None
    logprobs: bool = False  # each answer token's log-probability
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)  # needs logprobs


class OllamaChatRequest(OllamaBase):
    messages: list[OllamaMessage] = Field(default_factory=list, max_length=1000)
    tools: list[ToolDef] | None = Field(None, max_length=256)
    think: Think | None = None


class OllamaGenerateRequest(OllamaBase):
    prompt: str = ""
    think: Think | None = None
    system: str | None = None
    raw: bool = False
    images: list[str] | None = None  # base64 images, before the prompt


class OllamaModelRequest(BaseModel):
    # one of the two names is required (the schema says so too)
    model_config = ConfigDict(extra="ignore", populate_by_name=True, json_schema_extra={
        "anyOf": [{"required": [key], "properties": {key: {"type": "string"}}}
              for key in ("model", "name")]})
    model: ModelName | None = None
    name: ModelName | None = None  # older clients send "name"

    @model_validator(mode="after")
    def _named(self) -> OllamaModelRequest:
        if not (self.model or self.name):
            raise PydanticCustomError("missing", "Field required: name the model (\"model\", "
                                      "or \"name\" as older clients send it)")
        return self

    @property
    def ref(self) -> str:
        return self.model or self.name or ""


class OllamaEmbedRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: LocalModelName
    input: EmbeddingInput
    keep_alive: str | int | float | None = None


class OllamaLegacyEmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: LocalModelName
    prompt: str = Field(min_length=1)


class OllamaPullRequest(OllamaModelRequest):
    stream: bool = True
    insecure: bool = False
