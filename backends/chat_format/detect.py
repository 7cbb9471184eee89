"""Which ChatFormat a chat template has, read from the template's own text (never the model's
name: fine-tunes and GGUF re-uploads keep their family's template under any name).

A template that renders tool calls shows the model their shape (Qwen's `<tool_call>`, Llama
3's `"parameters"`, Mistral's `[TOOL_CALLS]`, harmony's channels), and a thinking template
names its markers (`<think>`) and switches (`enable_thinking`, `reasoning_effort`). A chat
template with none of these gets the "generic" tool format, which Ember describes to the
model in the system prompt (backends.chat_format.generic)."""

from __future__ import annotations

from backends.chat_format.base import ChatFormat, ThinkingMarkers, ToolFormat

THINK = ThinkingMarkers("<think>", "</think>")
HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>",
                   "<|call|>", "<|return|>")
# call markers that are control tokens in their vocabularies: a backend detokenizes them as
# text so the parser sees them (Qwen's <tool_call> and <think> are ordinary added tokens,
# listed anyway: rendering a marker as its own text is always right)
CALL_MARKERS: dict[str, tuple[str, ...]] = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "llama3": ("<|python_tag|>",),
    "mistral": ("[TOOL_CALLS]",),
    "phi4": ("<|tool_call|>", "<|/tool_call|>"),
    "harmony": HARMONY_MARKERS,
}


def detect_format(template: str | None) -> ChatFormat:
    if not template:
        return ChatFormat()
    tools = _tool_format(template)
    harmony = tools == "harmony"
    thinking = THINK if not harmony and ("<think>" in template or "</think>" in template) \
        else None
    markers = CALL_MARKERS.get(tools, ())
    if thinking is not None:
        markers += (thinking.open, thinking.close)
    return ChatFormat(
        tools=tools,
        native_tools=tools != "generic",
        thinking=thinking,
        harmony=harmony,
        thinking_toggle="enable_thinking" in template,
        thinking_effort="reasoning_effort" in template,
        special_markers=markers,
    )


def _tool_format(template: str) -> ToolFormat:
    if "<|channel|>" in template and "<|message|>" in template:
        return "harmony"
    if "<tool_call>" in template:
        return "hermes"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    # Phi-4-mini's template takes the tools as a JSON string in the system message
    # (`'<|tool|>' + message['tools'] + '<|/tool|>'`); its model answers <|tool_call|>[..]
    if "<|tool|>" in template or "<|tool_call|>" in template:
        return "phi4"
    if "<|python_tag|>" in template or ("<|start_header_id|>" in template
                                        and '"parameters": ' in template):
        return "llama3"
    return "generic"
