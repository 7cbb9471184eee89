"""Anthropic's Messages API bodies (pydantic), as Anthropic's own schema has them, so its SDK
and the agents built on it (Claude Code) work unchanged and the OpenAPI document says what
the routes take. Blocks Ember cannot use (documents, Anthropic's server tools) are
still read here, so that the mapping (app.server.generation_request) can refuse them with a
message that says why, rather than a schema mismatch. The OpenAI bodies are in
app.server.openai.schemas, Ollama's in app.server.ollama.schemas."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from app.server.common_schemas import TOKEN_COUNT_MAX, SpeculativeOptions
from app.server.model_name import ModelName


def _text_or_blocks(value: object) -> str | None:
    """Which member of a `str | list[...]` field a value is, so that a bad block is named
    by its own error, not by the string alternative's "Input should be a valid string"."""
    if isinstance(value, str):
        return "text"
    return "blocks" if isinstance(value, list) else None


TEXT_OR_BLOCKS = Discriminator(
    _text_or_blocks, custom_error_type="text_or_blocks",
    custom_error_message="Input should be a string or a list of content blocks")


# ---------------------------------------------------------------------------- content blocks
class TextBlock(BaseModel):
    model_config = ConfigDict(extra="allow")  # cache_control, citations: accepted, unused
    type: Literal["text"]
    text: str


class ImageSource(BaseModel):
    """Where an image block's bytes are: `base64` (`media_type`, `data`), `url` (fetched
    only when the server is started to, `ember serve --allow-media-urls`) or `file` (the
    Files API's `file_id`: refused)."""
    model_config = ConfigDict(extra="allow")
    type: str
    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    file_id: str | None = None


class ImageBlock(BaseModel):
    """An image, for a model that sees (app.server.anthropic.inbound reads it)."""
    model_config = ConfigDict(extra="allow")
    type: Literal["image"]
    source: ImageSource | None = None


class DocumentBlock(BaseModel):
    """Read to be refused: Ember reads no documents (PDF, plain-text sources) yet."""
    model_config = ConfigDict(extra="allow")
    type: Literal["document"]


class ToolUseBlockIn(BaseModel):
    """A call the assistant made, coming back in the conversation."""
    model_config = ConfigDict(extra="allow")
    type: Literal["tool_use"]
    id: str = Field(min_length=1, max_length=200)
    name: str = Field(max_length=200)
    input: dict[str, Any]


ResultPart = Annotated[TextBlock | ImageBlock | DocumentBlock, Field(discriminator="type")]


class ToolResultBlockIn(BaseModel):
    """The result of the call `tool_use_id`, in the user turn after the call."""
    model_config = ConfigDict(extra="allow")
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1, max_length=200)
    content: Annotated[Annotated[str, Tag("text")] | Annotated[list[ResultPart], Tag("blocks")],
                       TEXT_OR_BLOCKS] | None = None
    is_error: bool = False


class ThinkingBlockIn(BaseModel):
    """The assistant's thinking in an earlier turn; its `signature` is Anthropic's and means
    nothing here (Ember's own answers carry an empty one)."""
    model_config = ConfigDict(extra="allow")
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlockIn(BaseModel):
    """Thinking Anthropic encrypted: nothing a local model can read, so it is dropped."""
    model_config = ConfigDict(extra="allow")
    type: Literal["redacted_thinking"]
    data: str = ""


ContentBlockIn = Annotated[
    TextBlock | ImageBlock | DocumentBlock | ToolUseBlockIn | ToolResultBlockIn
    | ThinkingBlockIn | RedactedThinkingBlockIn, Field(discriminator="type")]


class MessageIn(BaseModel):
    """One turn: user turns carry text and tool results, assistant turns text, thinking and
    tool calls, system turns text (Claude Code 2.1 sends its environment as a system turn
    after the user's; app.server.anthropic.inbound.anthropic_messages checks which goes
    where)."""
    model_config = ConfigDict(extra="allow")
    role: Literal["user", "assistant", "system"]
    content: Annotated[Annotated[str, Tag("text")]
                       | Annotated[list[ContentBlockIn], Tag("blocks")],
                       TEXT_OR_BLOCKS]


# ---------------------------------------------------------------------------- tools
class ToolIn(BaseModel):
    """A custom tool. Anthropic's server tools (`type` "web_search_20250305", "bash_...")
    run on Anthropic's side; they are read so that the mapping can say so."""
    model_config = ConfigDict(extra="allow")  # cache_control: accepted, unused
    type: str | None = Field(None, max_length=100)  # absent or "custom" for a custom tool
    name: str = Field(max_length=200)
    description: str | None = None
    input_schema: dict[str, Any] | None = None  # a JSON schema of an object

    @property
    def runs_on_anthropic(self) -> bool:
        """A server tool (web search, code execution, ...), which the client never runs."""
        return self.type not in (None, "custom")


class ToolChoiceAuto(BaseModel):
    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(BaseModel):
    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(BaseModel):
    type: Literal["tool"]
    name: str = Field(max_length=200)
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(BaseModel):
    type: Literal["none"]


AnthropicToolChoice = Annotated[ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool
                                | ToolChoiceNone, Field(discriminator="type")]


# ---------------------------------------------------------------------------- thinking
ThinkingDisplay = Literal["summarized", "omitted"]


class ThinkingEnabled(BaseModel):
    """Thinking on. Anthropic requires budget_tokens >= 1024 and below max_tokens; Ember
    checks both, but cannot hold a model to the budget (see anthropic_thinking)."""
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1024, le=TOKEN_COUNT_MAX)
    display: ThinkingDisplay | None = None


class ThinkingDisabled(BaseModel):
    type: Literal["disabled"]


class ThinkingAdaptive(BaseModel):
    """The model decides whether to think: Ember keeps the model's own default."""
    type: Literal["adaptive"]
    display: ThinkingDisplay | None = None


ThinkingConfig = Annotated[ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive,
                           Field(discriminator="type")]


# ---------------------------------------------------------------------------- output
class JsonOutputFormat(BaseModel):
    """Structured output: the answer is JSON of this schema (a grammar enforces it)."""
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(BaseModel):
    """How much effort the model puts in (Ember's scale stops at high: xhigh and max are
    high), and the answer's JSON schema."""
    model_config = ConfigDict(extra="ignore")
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JsonOutputFormat | None = None


# ---------------------------------------------------------------------------- requests
class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow")
    user_id: str | None = Field(None, max_length=256)


class CountTokensRequest(BaseModel):
    """What /v1/messages/count_tokens reads: a Messages request without its sampling."""
    model_config = ConfigDict(extra="ignore")
    model: ModelName
    system: Annotated[Annotated[str, Tag("text")] | Annotated[list[TextBlock], Tag("blocks")],
                      TEXT_OR_BLOCKS] | None = None
    messages: list[MessageIn] = Field(min_length=1, max_length=1000)
    tools: list[ToolIn] | None = Field(None, max_length=256)
    tool_choice: AnthropicToolChoice | None = None  # with tools: auto
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    backend: str | None = None  # Ember's extension: run a local model on this backend


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1, le=TOKEN_COUNT_MAX)  # required, as Anthropic has it
    stop_sequences: list[Annotated[str, Field(min_length=1)]] | None = Field(None,
                                                                             max_length=16)
    temperature: float | None = Field(None, ge=0, le=1)  # Anthropic's range
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)  # 0: off
    metadata: Metadata | None = None  # accepted, unused
    stream: bool = False
    speculative: SpeculativeOptions | bool | None = None  # Ember's extension


# ---------------------------------------------------------------------------- responses
class ThinkingBlockOut(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""  # Anthropic signs its thinking; Ember has nothing to sign it with


class TextBlockOut(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlockOut(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str  # toolu_...
    name: str
    input: dict[str, Any]


ContentBlockOut = Annotated[ThinkingBlockOut | TextBlockOut | ToolUseBlockOut,
                            Field(discriminator="type")]
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class AnthropicUsage(BaseModel):
    """Anthropic counts prompt tokens read from the cache apart: `input_tokens` +
    `cache_read_input_tokens` is the whole prompt. Ember writes no cache entries a client
    pays for, so `cache_creation_input_tokens` is always 0."""
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class MessageResponse(BaseModel):
    id: str  # msg_...
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlockOut]
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: AnthropicUsage


class TokenCount(BaseModel):
    input_tokens: int


class AnthropicErrorDetail(BaseModel):
    type: str  # invalid_request_error, authentication_error, not_found_error, ...
    message: str


class AnthropicErrorResponse(BaseModel):
    type: Literal["error"] = "error"
    error: AnthropicErrorDetail
