"""What every model family must get right, as data: the conformance test
(tests/unit/test_family_conformance.py) runs each case through its family's real chat
template, parser, vocabulary and grammar.

A case is one output shape of one family: the text its model writes (thinking, answer,
calls), and the content, reasoning and calls that text must parse into. A family module
under backends/chat_format/families/ adds its cases here: at least one with parallel
calls and arguments holding the family's markers, braces, quotes and unicode inside
strings, and one with thinking where the family thinks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backends.base import Tool

WEATHER = Tool("get_weather", "The weather in a city",
               {"type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                               "unit": {"enum": ["celsius", "fahrenheit"]}},
                "required": ["city"]})
TIME = Tool("get_time", "The time now", {"type": "object", "properties": {}})
NOTE = Tool("write_note", "Write a note",
            {"type": "object",
             "properties": {"text": {"type": "string"},
                            "tags": {"type": "array", "items": {"type": "string"}}},
             "required": ["text"]})
TOOLS = (WEATHER, TIME, NOTE)


@dataclass(frozen=True)
class FamilyCase:
    family: str  # the ChatFormat.tools name its templates detect as
    templates: tuple[str, ...]  # llama.cpp's vendored templates (or tests/data/templates)
    output: str  # what the model writes after the prompt
    calls: tuple[tuple[str, dict], ...] = ()
    content: str = ""
    reasoning: str = ""
    vocab: str | None = None  # a vendored ggml-vocab-NAME.gguf the output is replayed through
    # the exact text the family's grammar writes for `required` (a call of get_weather with
    # {"city": "Paris"}); None: the family's grammar is checked by its own test
    forced: str | None = None
    thinking_open: bool = False  # the prompt opened the thinking
    id: str = ""
    markers: tuple[str, ...] = field(default_factory=tuple)  # never in content or calls

    def __str__(self) -> str:
        return self.id or self.family


TRICKY = "Zürich \"quoted\" {braces} [x] </tool_call> 🙂"

CASES: list[FamilyCase] = [
    FamilyCase(
        "hermes", ("Qwen-Qwen3-0.6B", "Qwen-Qwen2.5-7B-Instruct", "ibm-granite-granite-4.0"),
        "<think>\nLet me look.\n</think>\n\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n'
        "<tool_call>\n"
        '{"name": "write_note", "arguments": {"text": "Zürich \\"quoted\\" {braces} [x] '
        '</tool_call> 🙂"}}\n</tool_call>',
        calls=(("get_weather", {"city": "Paris", "days": 2}), ("write_note", {"text": TRICKY})),
        reasoning="Let me look.", vocab="qwen2",
        forced='<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
               "</tool_call>",
        id="hermes-qwen3", markers=("<tool_call>", "</tool_call>", "<think>", "</think>")),
    FamilyCase(
        "llama3", ("meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct"),
        '{"name": "get_weather", "parameters": {"city": "Zürich {x}"}}',
        calls=(("get_weather", {"city": "Zürich {x}"}),), vocab="llama-bpe",
        forced='{"name": "get_weather", "parameters": {"city": "Paris"}}',
        markers=("<|python_tag|>",)),
    FamilyCase(
        "mistral", ("mistralai-Mistral-7B-Instruct-v0.3", "mistralai-Mistral-Nemo-Instruct-2407"),
        'Checking. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, '
        '"id": "abcdefghi"}, {"name": "get_time", "arguments": {}}]',
        calls=(("get_weather", {"city": "Paris"}), ("get_time", {})), content="Checking.",
        forced='[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        id="mistral-list", markers=("[TOOL_CALLS]",)),
    FamilyCase(
        "phi4", ("microsoft-Phi-4-mini-instruct",),
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_time", "arguments": {}}]<|/tool_call|>',
        calls=(("get_weather", {"city": "Paris"}), ("get_time", {})),
        forced='<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
               "<|/tool_call|>",
        markers=("<|tool_call|>", "<|/tool_call|>")),
    FamilyCase(
        "harmony", ("openai-gpt-oss-120b",),
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Zürich <|call|> {x}"}<|call|>',
        calls=(("get_weather", {"city": "Zürich <|call|> {x}"}),), reasoning="Need weather.",
        markers=("<|channel|>", "<|message|>")),
    FamilyCase(
        "generic", ("google-gemma-3-it", "microsoft-Phi-3.5-mini-instruct"),
        'Sure.\n[TOOL_REQUEST]{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "[END_TOOL_REQUEST]",
        calls=(("get_weather", {"city": "Paris"}),), content="Sure.",
        forced='[TOOL_REQUEST]{"name": "get_weather", "arguments": {"city": "Paris"}}'
               "[END_TOOL_REQUEST]",
        markers=("[TOOL_REQUEST]", "[END_TOOL_REQUEST]")),
    # -- Mistral 2025 (families/mistral_args.py) --
    FamilyCase(
        "mistral_args", ("mistralai-Ministral-3-14B-Reasoning-2512",),
        "[THINK]Paris, and a note [TOOL_CALLS]x[ARGS]{}.[/THINK]Checking."
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}'
        '[TOOL_CALLS]write_note[ARGS]{"text": "Zürich \\"quoted\\" {braces} [x] '
        '[TOOL_CALLS]n[ARGS]{} 🙂", "tags": ["a]", "}"]}',
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": 'Zürich "quoted" {braces} [x] [TOOL_CALLS]n[ARGS]{} 🙂',
                               "tags": ["a]", "}"]})),
        content="Checking.", reasoning="Paris, and a note [TOOL_CALLS]x[ARGS]{}.",
        forced='[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        id="mistral-args-ministral", markers=("[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]")),
    FamilyCase(
        "mistral_args", ("Mistral-Small-3.2-24B-Instruct-2506",
                         "unsloth-mistral-Devstral-Small-2507"),
        '[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}'
        "[TOOL_CALLS]get_time[CALL_ID]000000002[ARGS]{}",
        calls=(("get_weather", {"city": "Paris"}), ("get_time", {})),
        forced='[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}',
        id="mistral-args-call-id", markers=("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")),
    # -- DeepSeek (families/deepseek_v3.py, deepseek_r1.py) --
    FamilyCase(
        "deepseek_v3", ("deepseek-ai-DeepSeek-V3.1",),
        "<think>Two calls.</think>Checking both."
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "Paris", "days": 2}<｜tool▁call▁end｜>'
        "<｜tool▁call▁begin｜>write_note<｜tool▁sep｜>"
        '{"text": "Zürich \\"quoted\\" {braces} [x] <｜tool▁call▁end｜><｜tool▁calls▁end｜> 🙂", '
        '"tags": ["}"]}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": 'Zürich "quoted" {braces} [x] <｜tool▁call▁end｜>'
                                       '<｜tool▁calls▁end｜> 🙂', "tags": ["}"]})),
        content="Checking both.", reasoning="Two calls.", vocab="deepseek-llm",
        forced="<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
               '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        id="deepseek-v3.1",
        markers=("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                 "<think>", "</think>")),
    FamilyCase(
        "deepseek_r1", ("llama-cpp-deepseek-r1",),
        "The user wants Paris.\n</think>\n\n"
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Zürich ```json {x}"}\n```<｜tool▁call▁end｜>\n'
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        calls=(("get_weather", {"city": "Zürich ```json {x}"}), ("get_time", {})),
        reasoning="The user wants Paris.", vocab="deepseek-llm",
        forced="<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
               '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        id="deepseek-r1",
        markers=("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                 "<think>", "</think>")),
    # -- Kimi K2 (families/kimi_k2.py) --
    FamilyCase(
        "kimi_k2", ("Kimi-K2-Thinking",),
        "<think>Weather and a note.</think>On it."
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris", "days": 2}<|tool_call_end|>'
        "<|tool_call_begin|>functions.write_note:1<|tool_call_argument_begin|>"
        '{"text": "Zürich \\"quoted\\" {braces} [x] <|tool_call_end|><|tool_calls_section_end|>'
        ' 🙂"}<|tool_call_end|><|tool_calls_section_end|>',
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": 'Zürich "quoted" {braces} [x] <|tool_call_end|>'
                                       '<|tool_calls_section_end|> 🙂'})),
        content="On it.", reasoning="Weather and a note.",
        forced="<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
               '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
               "<|tool_calls_section_end|>",
        id="kimi-k2-thinking",
        markers=("<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                 "<|tool_call_argument_begin|>", "<think>", "</think>")),
    FamilyCase(
        "kimi_k2", ("moonshotai-Kimi-K2", "Kimi-K2-Instruct"),
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
        "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
        calls=(("get_time", {}),), id="kimi-k2",
        markers=("<|tool_calls_section_begin|>", "<|tool_call_begin|>")),
    # -- Gemma 4 (families/gemma4.py) --
    FamilyCase(
        "gemma4", ("google-gemma-4-31B-it", "google-gemma-4-31B-it-interleaved"),
        "Checking.<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:2}<tool_call|>"
        "<|tool_call>call:write_note{tags:[<|\"|>a}<|\"|>,<|\"|><tool_call|><|\"|>],"
        "text:<|\"|>Zürich \"quoted\" {braces} [x] <tool_call|><|tool_call> 🙂<|\"|>}"
        "<tool_call|>",
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"tags": ["a}", "<tool_call|>"],
                               "text": 'Zürich "quoted" {braces} [x] <tool_call|>'
                                       "<|tool_call> 🙂"})),
        content="Checking.", vocab="gemma-4", id="gemma4",
        markers=("<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>")),
    FamilyCase(
        "gemma4", ("google-gemma-4-31B-it-interleaved",),
        "<|channel>thought\nThe user wants Paris.<channel|>"
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}"
        "<tool_call|>",
        calls=(("get_weather", {"city": "Paris", "unit": "celsius"}),),
        reasoning="The user wants Paris.", vocab="gemma-4", id="gemma4-thinking",
        markers=("<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>")),
    # -- Kimi K3 (families/kimi_k3.py) --
    FamilyCase(
        "kimi_k3", ("Kimi-K3",),
        "Weather, and a note.<|close|>think<|sep|><|open|>response<|sep|>On it."
        "<|close|>response<|sep|><|open|>tools<|sep|>"
        '<|open|>call tool="get_weather" index="1"<|sep|>'
        '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'
        '<|open|>argument key="days" type="number"<|sep|>2<|close|>argument<|sep|>'
        "<|close|>call<|sep|>"
        '<|open|>call tool="write_note" index="2"<|sep|>'
        '<|open|>argument key="text" type="string"<|sep|>Zürich "quoted" {braces} [x] '
        "<tool_call> 🙂<|close|>argument<|sep|>"
        '<|open|>argument key="tags" type="array"<|sep|>["a", "}"]<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": 'Zürich "quoted" {braces} [x] <tool_call> 🙂',
                               "tags": ["a", "}"]})),
        content="On it.", reasoning="Weather, and a note.", id="kimi-k3",
        markers=("<|open|>", "<|close|>", "<|sep|>")),
]
