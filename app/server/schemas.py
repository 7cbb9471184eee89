"""Request and response bodies, mirroring OpenAI's and Ollama's own schemas (pydantic), so
their clients work unchanged and the OpenAPI document is generated from them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from backends.base import MAX_DRAFT

MAX_TOKENS_LIMIT = 8192


# ---------------------------------------------------------------------------- OpenAI
class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content if p.type == "text")


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str = "response"
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class SpeculativeOptions(BaseModel):
    """Ember's extension: speculative decoding for this request (see backends.base)."""
    model_config = ConfigDict(extra="forbid")
    method: Literal["draft", "lookup"] = "draft"
    draft_model: str | None = Field(None, max_length=200)
    max_draft: int = Field(8, ge=1, le=MAX_DRAFT)
    adaptive: bool = True  # False: always propose max_draft tokens (benchmarks, tests)


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(max_length=200)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, lt=2**32)
    n: int = Field(1, ge=1, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    user: str | None = None
    backend: str | None = None  # Ember's extension: run a local model on this backend
    speculative: SpeculativeOptions | None = None  # Ember's extension


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1, max_length=1000)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    response_format: ResponseFormat | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str]
    max_tokens: int | None = Field(16, ge=1, le=MAX_TOKENS_LIMIT)  # OpenAI's default


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(max_length=200)
    input: str | list[str] = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"  # the openai SDK asks for base64
    user: str | None = None


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # str: base64 of little-endian float32


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage


class CompletionTokensDetails(BaseModel):
    """OpenAI's counts for predicted outputs; Ember reports speculative decoding's here."""
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: CompletionTokensDetails | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None
    logprobs: None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "ember"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


# ---------------------------------------------------------------------------- Ollama
class OllamaOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    repeat_penalty: float | None = Field(None, gt=0, le=10)
    seed: int | None = Field(None, ge=0, lt=2**32)
    num_predict: int | None = Field(None, ge=-2, le=MAX_TOKENS_LIMIT)
    backend: str | None = None  # Ember's extension: run a local model on this backend
    num_ctx: int | None = Field(None, ge=256, le=131072)
    stop: list[str] | None = None


class OllamaMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""


class OllamaBase(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(max_length=200)
    stream: bool = True
    format: str | dict[str, Any] | None = None
    options: OllamaOptions | None = None
    speculative: SpeculativeOptions | None = None  # Ember's extension
    keep_alive: str | int | float | None = None


class OllamaChatRequest(OllamaBase):
    messages: list[OllamaMessage] = Field(default_factory=list, max_length=1000)


class OllamaGenerateRequest(OllamaBase):
    prompt: str = ""
    system: str | None = None
    raw: bool = False


class OllamaModelRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    model: str | None = Field(None, max_length=200)
    name: str | None = Field(None, max_length=200)  # older clients send "name"

    @property
    def ref(self) -> str:
        return self.model or self.name or ""


class OllamaEmbedRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(max_length=200)
    input: str | list[str] = Field(min_length=1)
    keep_alive: str | int | float | None = None


class OllamaLegacyEmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(max_length=200)
    prompt: str = Field(min_length=1)


class OllamaPullRequest(OllamaModelRequest):
    stream: bool = True
    insecure: bool = False
