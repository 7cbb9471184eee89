"""OpenAI's request and response bodies (pydantic), mirroring OpenAI's own schema so its
clients work unchanged and the OpenAPI document is generated from them. The fields every dialect
shares are in app.server.common_schemas; each dialect's own in its package's schemas."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from app.server.common_schemas import TOKEN_COUNT_MAX, SpeculativeOptions
from app.server.model_name import LocalModelName, ModelName
from app.server.settings import ReasoningField
from backends.base import MAX_TOP_LOGPROBS


class ImageUrl(BaseModel):
    """An image: a `data:image/...;base64,` URL, or an http(s) URL the server fetches only
    when started to (`ember serve --allow-media-urls`). `detail` is taken and unused."""
    model_config = ConfigDict(extra="allow")
    url: str
    detail: str | None = None


class InputAudio(BaseModel):
    model_config = ConfigDict(extra="allow")
    data: str  # base64
    format: str | None = None  # "wav", "mp3" (OpenAI's), "flac"


class ContentPart(BaseModel):
    """A part of a message's content: `text`, `image_url` or `input_audio` (other types, such
    as an assistant's `refusal`, are read and left out)."""
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None
    image_url: ImageUrl | str | None = None  # some clients send the URL itself
    input_audio: InputAudio | None = None


class FunctionCall(BaseModel):
    name: str
    arguments: str  # a JSON object, as text


class FunctionCallIn(BaseModel):
    """A call coming back in a conversation. `arguments` is JSON text on OpenAI's wire; an
    object is taken too (some clients send what Ollama sends)."""
    model_config = ConfigDict(extra="allow")
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field("", max_length=200)
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessage(BaseModel):
    """One turn. An assistant turn may carry its `tool_calls` (then `content` may be null) and
    its thinking (`reasoning_content`, or `reasoning` as Ollama's and vLLM's clients send it);
    a `tool` turn is the result of the call `tool_call_id` (legacy: of the function `name`)."""
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = Field(None, max_length=200)
    tool_calls: list[ToolCallIn] | None = Field(None, max_length=128)
    tool_call_id: str | None = Field(None, max_length=200)
    reasoning_content: str | None = None
    reasoning: str | None = None


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str = "response"
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: JsonSchemaFormat | None = None


class FunctionDef(BaseModel):
    """A function the model may call. Its name and schema are checked by Ember's own rules
    (backends.base.check_tools), which say where in `parameters` a schema is wrong."""
    model_config = ConfigDict(extra="allow")
    name: str = Field(max_length=200)
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of an object; none: no arguments
    strict: bool | None = None


class ToolDef(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(BaseModel):
    name: str = Field(max_length=200)


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoiceMode = Literal["none", "auto", "required"]


class ReasoningOptions(BaseModel):
    """OpenRouter's and Ollama's `reasoning: {effort}` (`enabled` as OpenRouter has it)."""
    model_config = ConfigDict(extra="ignore")
    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    enabled: bool | None = None




class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: ModelName
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=TOKEN_COUNT_MAX)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, lt=2**32)
    n: int = Field(1, ge=1, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    user: str | None = None
    backend: str | None = None  # Ember's extension: run a local model on this backend
    speculative: SpeculativeOptions | bool | None = None  # Ember's extension


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1, max_length=1000)
    # steers the prefix cache: caches of the same key are overwritten first
    prompt_cache_key: str | None = Field(None, max_length=1024)
    max_completion_tokens: int | None = Field(None, ge=1, le=TOKEN_COUNT_MAX)
    response_format: ResponseFormat | None = None
    tools: list[ToolDef] | None = Field(None, max_length=256)
    tool_choice: ToolChoiceMode | NamedToolChoice | None = None  # with tools: auto
    parallel_tool_calls: bool | None = None  # OpenAI's default: true
    # thinking: "none" is off; the three knobs clients send become one (Thinking)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    reasoning: ReasoningOptions | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # enable_thinking, reasoning_effort
    reasoning_field: ReasoningField | None = None  # Ember's extension: the server's default
    # Ember's extension: drop the oldest turns to fit the context, as the window and `ember
    # chat` do in-process (app.chat.policy), instead of the 400 of a prompt too long
    truncate: bool = False
    logprobs: bool = False  # each answer token's log-probability
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)  # needs logprobs


class CompletionRequest(SamplingFields):
    prompt: str | list[str]
    max_tokens: int | None = Field(16, ge=1, le=TOKEN_COUNT_MAX)  # OpenAI's default
    # the legacy API's form: how many of the most likely tokens each position lists (0: only
    # the chosen one); OpenAI allows 5, Ember as many as chat's top_logprobs
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


# One text or a list of them, neither empty. The validator reads it as one union with one
# bound (its errors name the bound, not the union member it tried); the schema states the
# bound on each member, where JSON Schema applies it (minLength to strings, minItems to lists).
EmbeddingInput = Annotated[str | list[str], Field(min_length=1), WithJsonSchema({
    "anyOf": [{"type": "string", "minLength": 1},
              {"type": "array", "items": {"type": "string"}, "minItems": 1}]})]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: LocalModelName
    input: EmbeddingInput
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
    """Thinking tokens (part of completion_tokens), and OpenAI's counts for predicted outputs,
    where Ember reports speculative decoding's."""
    reasoning_tokens: int = 0
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


class PromptTokensDetails(BaseModel):
    """Prompt tokens served from the KV cache (a conversation's earlier turns, a shared
    system prompt): OpenAI's automatic prompt caching, as llama-server also reports it.
    `disk_tokens`, Ember's own, is the part of them restored from a cache saved on disk
    before a restart (backends/llamacpp/kv_store.py); clients that do not know it ignore it."""
    cached_tokens: int = 0
    disk_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None
    # Ember's extension: earlier turns were dropped to fit the context (a request sent with
    # `truncate`, as the front ends that join the service send theirs); null otherwise
    truncated: bool | None = None


class ToolCallOut(BaseModel):
    id: str  # call_...
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    """The answer: `content` is null when the model only called tools; the thinking is in
    `reasoning_content` and/or `reasoning` (the request's reasoning_field), absent when
    there was none."""
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallOut] | None = None


class TopLogprobOut(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobOut(TopLogprobOut):
    top_logprobs: list[TopLogprobOut]


class ChatLogprobs(BaseModel):
    """Every answer token's log-probability under the model (its raw distribution, before
    sampling settings), thinking and tool-call tokens included, as llama-server reports."""
    content: list[TokenLogprobOut] | None
    refusal: None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChatLogprobs | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None


class CompletionLogprobs(BaseModel):
    """The legacy completions form: parallel lists per generated token, `top_logprobs` a
    token -> logprob map per position (tokens with the same text keep the likelier one)."""
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None
    logprobs: CompletionLogprobs | None = None


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
