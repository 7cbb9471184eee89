"""OpenAI Responses API bodies (pydantic), mirroring the official schema (the `openai` SDK's
`types.responses`) for what Ember serves: text, images and audio in; text, thinking and
function calls out. Anything else a client may send (files, hosted tools such as web_search,
other item types) is refused with a 400 that names it, rather than silently dropped."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from app.server.common_schemas import TOKEN_COUNT_MAX, SpeculativeOptions
from app.server.model_name import ModelName
from app.server.openai.schemas import ToolChoiceMode

ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning", "mcp_call")
# parts a later Ember may read (files), named in their 400 until then
UNSUPPORTED_PARTS = ("input_file",)


def _text_or_list(value: object) -> str:
    """Which side of `str | list[...]` a value is on: pydantic then reports only that side's
    errors (a bad part, rather than "Input should be a valid string" first)."""
    return "text" if isinstance(value, str) else "list"


# ---------------------------------------------------------------------------- input
def _text_part(value: object) -> object:
    if isinstance(value, dict) and value.get("type") in UNSUPPORTED_PARTS:
        raise PydanticCustomError(
            "unsupported_part", "{kind} parts are not supported: Ember reads no files yet "
            "(send their text as input_text, images as input_image)", {"kind": value["type"]})
    return value


class TextPart(BaseModel):
    """Text of a message or a tool output: `input_text` from the client, `output_text` in an
    assistant message the client sends back."""
    model_config = ConfigDict(extra="ignore")
    type: Literal["input_text", "output_text"]
    text: str


class ImagePart(BaseModel):
    """An image: `image_url` a base64 data URL, or an http(s) URL the server fetches only
    when started to (`ember serve --allow-media-urls`); `file_id` (OpenAI's Files API) is
    refused, `detail` taken and unused."""
    model_config = ConfigDict(extra="ignore")
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class AudioData(BaseModel):
    model_config = ConfigDict(extra="ignore")
    data: str  # base64
    format: str | None = None  # "wav", "mp3", "flac"


class AudioPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["input_audio"]
    input_audio: AudioData


def _part_kind(value: object) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return {"input_image": "image", "input_audio": "audio"}.get(str(kind), "text")


ContentPart = Annotated[
    Annotated[Annotated[TextPart, BeforeValidator(_text_part)], Tag("text")]
    | Annotated[ImagePart, Tag("image")] | Annotated[AudioPart, Tag("audio")],
    Discriminator(_part_kind)]
TextParts = list[ContentPart]
TextOrParts = Annotated[Annotated[str, Tag("text")] | Annotated[TextParts, Tag("list")],
                        Discriminator(_text_or_list)]


class MessageItem(BaseModel):
    """A turn; `type` may be left out (OpenAI's "easy input message"). developer is system."""
    model_config = ConfigDict(extra="ignore")
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: TextOrParts


class FunctionCallItem(BaseModel):
    """A call the model made (an output item sent back): `arguments` is a JSON object as
    text."""
    model_config = ConfigDict(extra="ignore")
    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=200)
    name: str = Field(max_length=200)
    arguments: str
    id: str | None = Field(None, max_length=200)
    namespace: str | None = Field(None, max_length=200)  # a function of a namespace tool


class FunctionCallOutputItem(BaseModel):
    """The result of the call `call_id`, made earlier in the conversation."""
    model_config = ConfigDict(extra="ignore")
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1, max_length=200)
    output: TextOrParts


class SummaryText(BaseModel):
    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningText(BaseModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItem(BaseModel):
    """The model's thinking before the assistant items that follow it. Its `content` is what
    becomes the turn's reasoning; `summary` and `encrypted_content` (OpenAI's, which Ember
    cannot read) are accepted and left out."""
    model_config = ConfigDict(extra="ignore")
    type: Literal["reasoning"]
    id: str | None = Field(None, max_length=200)
    summary: list[SummaryText] = []
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None


class McpCallItem(BaseModel):
    """A call of an MCP tool the server ran (an mcp_call output item sent back, as
    `ember serve --mcp` makes them): the call and its result, `output` or `error`."""
    model_config = ConfigDict(extra="ignore")
    type: Literal["mcp_call"]
    id: str = Field(min_length=1, max_length=200)
    server_label: str = Field("", max_length=200)
    name: str = Field(max_length=200)
    arguments: str = ""
    output: str | None = None
    # OpenAI's error object ({"type": "mcp_tool_execution_error", "content": ...}, ...), or
    # the text older clients have
    error: str | dict[str, Any] | None = None

    def result(self) -> str:
        """What the model read of the call: its output, or its error's text."""
        if self.error is None:
            return self.output or ""
        if isinstance(self.error, str):
            return self.error
        content = self.error.get("content")
        if isinstance(content, list):
            texts = [b["text"] for b in content
                     if isinstance(b, dict) and isinstance(b.get("text"), str)]
            if texts:
                return "\n".join(texts)
        message = self.error.get("message")
        return message if isinstance(message, str) else json.dumps(self.error)


def _item_kind(value: object) -> str:
    if isinstance(value, dict):
        return str(value.get("type", "message"))
    return str(getattr(value, "type", ""))


def _known_item(value: object) -> object:
    if not isinstance(value, dict):
        raise PydanticCustomError("input_item", "an input item is an object: a message, "
                                  "function_call, function_call_output, reasoning or mcp_call "
                                  "item")
    kind = value.get("type", "message")
    if kind not in ITEM_TYPES:
        raise PydanticCustomError(
            "unsupported_item", "item type {kind} is not supported: Ember takes message, "
            "function_call, function_call_output, reasoning and mcp_call items",
            {"kind": repr(kind)})
    return value


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")] | Annotated[McpCallItem, Tag("mcp_call")],
    Discriminator(_item_kind), BeforeValidator(_known_item)]
Input = Annotated[Annotated[str, Tag("text")]
                  | Annotated[list[InputItem], Field(min_length=1, max_length=10_000),
                              Tag("list")],
                  Discriminator(_text_or_list)]


class FunctionTool(BaseModel):
    """A function the model may call (names and schemas are checked by Ember's own rules,
    backends.base.check_tools). `strict` is echoed; constrained decoding applies to forced
    calls (tool_choice required or named)."""
    model_config = ConfigDict(extra="ignore")
    type: Literal["function"]
    name: str = Field(max_length=200)
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of an object; none: no arguments
    strict: bool | None = None


class HostedTool(BaseModel):
    """A tool OpenAI runs on its own servers (web_search, file_search, code_interpreter,
    computer_use_preview, image_generation, mcp, ...) or a freeform `custom` tool: Ember
    does not offer it to the model (app.server.responses.tools says why)."""
    model_config = ConfigDict(extra="allow")
    type: str = Field(max_length=200)
    name: str | None = Field(None, max_length=200)


def _tool_kind(value: object) -> str:
    kind = value.get("type", "function") if isinstance(value, dict) else getattr(
        value, "type", "function")
    return kind if kind in ("function", "namespace") else "hosted"


NamespaceMember = Annotated[Annotated[FunctionTool, Tag("function")]
                            | Annotated[HostedTool, Tag("hosted")],
                            Discriminator(lambda v: "function" if _tool_kind(v) == "function"
                                          else "hosted")]


class NamespaceTool(BaseModel):
    """Functions grouped under one name (Codex's sub-agent tools): the model is offered the
    functions, and a call of one names its namespace."""
    model_config = ConfigDict(extra="ignore")
    type: Literal["namespace"]
    name: str = Field(max_length=200)
    description: str | None = None
    tools: list[NamespaceMember] = Field(max_length=256)


ResponseTool = Annotated[Annotated[FunctionTool, Tag("function")]
                         | Annotated[NamespaceTool, Tag("namespace")]
                         | Annotated[HostedTool, Tag("hosted")], Discriminator(_tool_kind)]


class FunctionChoice(BaseModel):
    type: Literal["function"]
    name: str = Field(max_length=200)


def _function_choice(value: object) -> object:
    if isinstance(value, dict) and value.get("type") != "function":
        raise PydanticCustomError(
            "unsupported_tool_choice", "tool_choice forces the tool type {kind}, a tool OpenAI "
            "runs on its own servers, which Ember cannot run: use \"auto\", \"none\", "
            "\"required\" or {\"type\": \"function\", \"name\": ...}",
            {"kind": repr(value.get("type"))})
    return value


ToolChoiceParam = Annotated[
    Annotated[ToolChoiceMode, Tag("mode")]
    | Annotated[FunctionChoice, BeforeValidator(_function_choice), Tag("named")],
    Discriminator(lambda v: "mode" if isinstance(v, str) else "named")]


class ReasoningConfig(BaseModel):
    """Thinking: `effort` none turns it off, any other level on (gpt-oss's templates also read
    the level). Ember makes no summaries: `summary` is echoed, reasoning items carry the
    thinking itself in `content`."""
    model_config = ConfigDict(extra="ignore")
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class FormatText(BaseModel):
    type: Literal["text"]  # required, as the discriminator reads it


class FormatJsonObject(BaseModel):
    type: Literal["json_object"]


class FormatJsonSchema(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    type: Literal["json_schema"]
    name: str = Field("response", max_length=200)
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(BaseModel):
    """The answer's format: plain text, any JSON object, or JSON of a schema (a grammar).
    `verbosity` is OpenAI's hint to its own models; it is accepted and ignored."""
    model_config = ConfigDict(extra="ignore")
    format: Annotated[FormatText | FormatJsonObject | FormatJsonSchema,
                      Field(discriminator="type")] = FormatText(type="text")


class ResponseCreateRequest(BaseModel):
    """POST /v1/responses. Fields of OpenAI's that Ember has no use for (user,
    client_metadata, service_tier, truncation, stream_options...) are ignored.
    `prompt_cache_key` steers the prefix cache (GenerationRequest.cache_key: caches of the
    same key are overwritten first; a conversation's cache is found by its tokens, whoever
    sends it); `include` is accepted and ignored: Ember's reasoning items carry their text,
    there is no encrypted reasoning, no logprobs or sources to add."""
    model_config = ConfigDict(extra="ignore")
    model: ModelName
    input: Input
    instructions: str | None = None
    tools: list[ResponseTool] | None = Field(None, max_length=256)
    tool_choice: ToolChoiceParam | None = None  # auto
    parallel_tool_calls: bool | None = None  # OpenAI's default: true
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=TOKEN_COUNT_MAX)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = Field(None, max_length=200)
    metadata: dict[str, str] | None = None
    text: TextConfig | None = None
    include: list[str] | None = None
    prompt_cache_key: str | None = Field(None, max_length=1024)
    speculative: SpeculativeOptions | bool | None = None  # Ember's extension
    # Taken so that their refusals can name them, and documented as what is accepted: true is
    # refused (every response is answered at once); a conversation object is refused (use
    # previous_response_id).
    background: Annotated[bool | None, WithJsonSchema(
        {"anyOf": [{"const": False}, {"type": "null"}], "title": "Background"})] = None
    conversation: Annotated[str | dict[str, Any] | None, WithJsonSchema(
        {"type": "null", "title": "Conversation"})] = None


# ---------------------------------------------------------------------------- output
class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str = ""
    annotations: list[Any] = []


ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputMessage(BaseModel):
    type: Literal["message"] = "message"
    id: str  # msg_...
    role: Literal["assistant"] = "assistant"
    status: ItemStatus = "in_progress"
    content: list[OutputText] = []


class OutputReasoning(BaseModel):
    """The thinking, whole, in `content` (Ember writes no summary)."""
    type: Literal["reasoning"] = "reasoning"
    id: str  # rs_...
    summary: list[SummaryText] = []
    content: list[ReasoningText] = []
    status: ItemStatus = "in_progress"


class OutputFunctionCall(BaseModel):
    type: Literal["function_call"] = "function_call"
    id: str  # fc_...
    call_id: str  # call_...: what the client's function_call_output names
    name: str
    namespace: str | None = None  # the namespace tool the function belongs to, if any
    arguments: str = ""
    status: ItemStatus = "in_progress"


class OutputMcpCall(BaseModel):
    """A call of an MCP tool that `ember serve --mcp` ran for the model (OpenAI's remote MCP
    item): `output` what the tool returned, or `error` why it failed or was not run."""
    type: Literal["mcp_call"] = "mcp_call"
    id: str  # mcp_...
    server_label: str  # the server's name in mcp.json
    name: str  # the tool's own name on its server
    arguments: str = ""
    output: str | None = None
    error: dict[str, Any] | None = None  # {"type": "mcp_tool_execution_error", "content": ...}
    status: Literal["in_progress", "completed", "failed"] = "in_progress"
    approval_request_id: str | None = None  # Ember's approvals are the user's, given before


OutputItem = Annotated[OutputMessage | OutputReasoning | OutputFunctionCall | OutputMcpCall,
                       Field(discriminator="type")]


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0  # prompt tokens reused from the KV cache
    # OpenAI's explicit prompt cache; Ember's reuse is automatic, shown as cached_tokens
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"]


class ResponseError(BaseModel):
    code: Literal["server_error", "invalid_prompt"]
    message: str


class ResponseObject(BaseModel):
    """A response, as POST answers it, GET returns it and response.completed carries it.
    There is no `output_text` on the wire: the SDKs compute it from `output`."""
    id: str  # resp_...
    object: Literal["response"] = "response"
    created_at: int
    completed_at: int | None = None
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    incomplete_details: IncompleteDetails | None = None
    error: ResponseError | None = None
    model: str
    output: list[OutputItem] = []
    usage: ResponseUsage | None = None
    previous_response_id: str | None = None
    instructions: str | None = None
    tools: list[ResponseTool] = []
    tool_choice: ToolChoiceMode | FunctionChoice = "auto"
    parallel_tool_calls: bool = True
    temperature: float
    top_p: float
    max_output_tokens: int | None = None
    reasoning: ReasoningConfig = ReasoningConfig()
    text: TextConfig = TextConfig()
    metadata: dict[str, str] = {}
    store: bool = True


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: Literal[True] = True
