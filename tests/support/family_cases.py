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
        "hermes", ("Qwen-Qwen3-0.6B", "Qwen-Qwen2.5-7B-Instruct", "ibm-granite-granite-4.0",
                   "ibm-granite-granite-4.1"),
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
    FamilyCase(
        "nemotron_v2", ("NVIDIA-Nemotron-Nano-v2",),
        "Two calls.\n</think>\n\n<TOOLCALL>["
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "write_note", "arguments": {"text": "Zürich \\"quoted\\" {braces} [x] '
        '</TOOLCALL> 🙂", "tags": ["a]", "}b"]}}]</TOOLCALL>\n',
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": "Zürich \"quoted\" {braces} [x] </TOOLCALL> 🙂",
                               "tags": ["a]", "}b"]})),
        reasoning="Two calls.", vocab="qwen2", thinking_open=True,
        forced='<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
               "</TOOLCALL>",
        id="nemotron-v2", markers=("<TOOLCALL>", "</TOOLCALL>", "<think>", "</think>")),
    FamilyCase(
        "nemotron_v2", ("NVIDIA-Nemotron-Nano-v2",),
        "The user greets.\n</think>\nHello! Ask me about the weather.",
        content="Hello! Ask me about the weather.", reasoning="The user greets.",
        thinking_open=True, id="nemotron-v2-answer",
        markers=("<TOOLCALL>", "</TOOLCALL>", "<think>", "</think>")),
    FamilyCase(
        "granite", ("ibm-granite-granite-3.3-2B-Instruct",),
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "write_note", "arguments": {"text": "Zürich \\"quoted\\" {braces} [x] '
        '<|tool_call|> 🙂"}}]',
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": "Zürich \"quoted\" {braces} [x] <|tool_call|> 🙂"})),
        vocab="qwen2",
        forced='<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        id="granite-3", markers=("<|tool_call|>", "<think>", "</think>")),
    FamilyCase(
        "granite", ("ibm-granite-granite-3.3-2B-Instruct",),
        "<think>A greeting, no tool needed.</think><response>Hello! What city?</response>",
        content="Hello! What city?", reasoning="A greeting, no tool needed.", vocab="qwen2",
        id="granite-3-thinking",
        markers=("<|tool_call|>", "<think>", "</think>", "<response>", "</response>")),
    FamilyCase(
        "hermes", ("ibm-granite-granite-4.1", "ibm-granite-granite-4.0"),
        'Checking both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        calls=(("get_weather", {"city": "Paris"}), ("get_time", {})), content="Checking both.",
        vocab="qwen2", id="hermes-granite-4", markers=("<tool_call>", "</tool_call>")),
    FamilyCase(
        "llama4", ("meta-llama-Llama-4-Scout-17B-16E-Instruct",),
        "[get_weather(city='Zürich \"quoted\" {braces} [x] <|python_end|> 🙂', days=2), "
        'write_note(text="it\'s (1, 2)]", tags=["a]", \'b)\'], ), get_time()]',
        calls=(("get_weather", {"city": "Zürich \"quoted\" {braces} [x] <|python_end|> 🙂",
                                "days": 2}),
               ("write_note", {"text": "it's (1, 2)]", "tags": ["a]", "b)"]}),
               ("get_time", {})),
        vocab="llama-bpe",
        forced='{"name": "get_weather", "parameters": {"city": "Paris"}}',
        id="llama4-pythonic", markers=("<|python_start|>", "<|python_end|>")),
    FamilyCase(
        "llama4", ("meta-llama-Llama-4-Scout-17B-16E-Instruct",),
        '<|python_start|><|python_end|>{"name": "get_weather", "parameters": {"city": "Paris", '
        '"unit": "celsius"}}{"name": "write_note", "parameters": {"text": "{\\"a\\": [1]} '
        '<|eot|>"}}',
        calls=(("get_weather", {"city": "Paris", "unit": "celsius"}),
               ("write_note", {"text": '{"a": [1]} <|eot|>'})),
        vocab="llama-bpe", id="llama4-json", markers=("<|python_start|>", "<|python_end|>")),
    FamilyCase(
        "llama4", ("meta-llama-Llama-4-Scout-17B-16E-Instruct",),
        '<|python_start|>[get_weather(city="Paris", days=-1)]<|python_end|>',
        calls=(("get_weather", {"city": "Paris", "days": -1}),),
        id="llama4-wrapped", markers=("<|python_start|>", "<|python_end|>")),
    FamilyCase(
        "llama4", ("meta-llama-Llama-4-Scout-17B-16E-Instruct",),
        "[1] Paris is sunny; see [get_weather(city='Paris')].",
        content="[1] Paris is sunny; see [get_weather(city='Paris')].",
        id="llama4-answer", markers=("<|python_start|>", "<|python_end|>")),
    FamilyCase(
        "lfm2", ("LFM2-8B-A1B", "LFM2.5-Instruct", "LFM2.5-8B-A1B"),
        "Checking.<|tool_call_start|>[get_weather(city='Zürich \"quoted\" {braces} [x] "
        "<|tool_call_end|> 🙂', days=2), write_note(text=\"a\\nb\", tags=['x)', \"]y\"]), "
        "get_time()]<|tool_call_end|>",
        calls=(("get_weather", {"city": "Zürich \"quoted\" {braces} [x] <|tool_call_end|> 🙂",
                                "days": 2}),
               ("write_note", {"text": "a\nb", "tags": ["x)", "]y"]}), ("get_time", {})),
        content="Checking.", vocab="qwen2",
        forced='<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>',
        id="lfm2", markers=("<|tool_call_start|>", "<|tool_call_end|>")),
    FamilyCase(
        "lfm2", ("LFM2.5-8B-A1B",),
        "<think>Let me think about <|tool_call_start|>[get_time()]<|tool_call_end|> hmm</think>"
        '<|tool_call_start|>[get_weather(city="Paris", unit="celsius")]<|tool_call_end|>',
        calls=(("get_weather", {"city": "Paris", "unit": "celsius"}),),
        reasoning="Let me think about <|tool_call_start|>[get_time()]<|tool_call_end|> hmm",
        vocab="qwen2", id="lfm2-thinking", markers=("<think>", "</think>")),
    FamilyCase(
        "cohere_action", ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "Cohere2MoE"),
        "<|START_THINKING|>I will check both.<|END_THINKING|><|START_ACTION|>[\n"
        '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", '
        '"days": 2}},\n    {"tool_call_id": "1", "tool_name": "write_note", "parameters": '
        '{"text": "Zürich \\"quoted\\" {braces} [x] <|END_ACTION|> 🙂"}}\n]<|END_ACTION|>',
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": "Zürich \"quoted\" {braces} [x] <|END_ACTION|> 🙂"})),
        reasoning="I will check both.", vocab="command-r",
        forced='<|START_ACTION|>[{"tool_name": "get_weather", "parameters": {"city": "Paris"}}]'
               "<|END_ACTION|>",
        id="command-r7b", markers=("<|START_ACTION|>", "<|END_ACTION|>", "<|START_THINKING|>",
                                   "<|END_THINKING|>", "<|START_RESPONSE|>")),
    FamilyCase(
        "cohere_action", ("CohereForAI-c4ai-command-r7b-12-2024-tool_use",),
        "<|START_RESPONSE|>Hello, world!\nWhat's up?<|END_RESPONSE|>",
        content="Hello, world!\nWhat's up?", vocab="command-r", id="command-r7b-answer",
        markers=("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_ACTION|>")),
    FamilyCase(
        "cohere_action", ("Cohere2MoE",),
        "I'm\nthinking<|END_THINKING|><|START_ACTION|>[\n"
        '    {"tool_call_id": "0", "tool_name": "get_time", "parameters": {}}\n]<|END_ACTION|>',
        calls=(("get_time", {}),), reasoning="I'm\nthinking", vocab="command-r",
        thinking_open=True, id="cohere2-moe",
        markers=("<|START_ACTION|>", "<|END_ACTION|>", "<|END_THINKING|>")),
    FamilyCase(
        "cohere_action", ("Cohere2MoE",),
        "Easy.<|END_THINKING|><|START_TEXT|>Hello, world!<|END_TEXT|>",
        content="Hello, world!", reasoning="Easy.", thinking_open=True, id="cohere2-moe-answer",
        markers=("<|START_TEXT|>", "<|END_TEXT|>", "<|END_THINKING|>")),
    FamilyCase(
        "functionary_v3_1", ("meetkai-functionary-medium-v3.1",),
        'Looking.<function=get_weather>{"city": "Paris", "days": 2}</function>'
        '<function=write_note>{"text": "Zürich \\"quoted\\" {braces} [x] </function> 🙂", '
        '"tags": ["<function=x>"]}</function>',
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": "Zürich \"quoted\" {braces} [x] </function> 🙂",
                               "tags": ["<function=x>"]})),
        content="Looking.", vocab="llama-bpe",
        forced='<function=get_weather>{"city": "Paris"}</function>',
        id="functionary-v3.1", markers=("<function=", "</function>")),
    FamilyCase(
        "apertus", ("Apertus-8B-Instruct",),
        "<|inner_prefix|>Two tools.<|inner_suffix|>"
        '<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 2}}, {"write_note": '
        '{"text": "Zürich \\"quoted\\" {braces} [x] <|tools_suffix|> 🙂", "tags": ["]"]}}]'
        "<|tools_suffix|>",
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": "Zürich \"quoted\" {braces} [x] <|tools_suffix|> 🙂",
                               "tags": ["]"]})),
        reasoning="Two tools.", vocab="qwen2",
        forced='<|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>',
        id="apertus", markers=("<|tools_prefix|>", "<|tools_suffix|>", "<|inner_prefix|>",
                               "<|inner_suffix|>")),
    FamilyCase(
        "gigachat", ("GigaChat3.1-10B-A1.8B",),
        'One moment.<|function_call|>{"name": "write_note", "arguments": {"text": '
        '"Zürich \\"quoted\\" {braces} [x] <|function_call|> 🙂", "tags": ["a", "}"]}}',
        calls=(("write_note", {"text": "Zürich \"quoted\" {braces} [x] <|function_call|> 🙂",
                               "tags": ["a", "}"]}),),
        content="One moment.", vocab="qwen2",
        forced='<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}',
        id="gigachat-3.1", markers=("<|function_call|>",)),
    FamilyCase(
        "minicpm5", ("openbmb-MiniCPM5-1B",),
        "<think>\nTwo calls.\n</think>\n\nSure.\n"
        '<function name="get_weather"><param name="city">Zürich "quoted" {braces} [x] 🙂'
        '</param><param name="days">2</param></function>\n<function name="write_note">'
        '<param name="text"><![CDATA[a <b> </param></function> & c]]></param>'
        '<param name="tags">["x", "}"]</param></function>',
        calls=(("get_weather", {"city": 'Zürich "quoted" {braces} [x] 🙂', "days": 2}),
               ("write_note", {"text": "a <b> </param></function> & c", "tags": ["x", "}"]})),
        content="Sure.", reasoning="Two calls.", vocab="qwen2",
        forced='<function name="get_weather"><param name="city">Paris</param></function>',
        id="minicpm5", markers=('<function name="', "</function>", "<think>", "</think>")),
    FamilyCase(
        "apriel", ("Apriel-1.6-15b-Thinker-fixed", "unsloth-Apriel-1.5"),
        "The user wants two things.\n[BEGIN FINAL RESPONSE]\n<tool_calls>["
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "write_note", "arguments": {"text": "Zürich \\"quoted\\" {braces} [x] '
        '</tool_calls> [BEGIN FINAL RESPONSE] 🙂"}}]</tool_calls>',
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": "Zürich \"quoted\" {braces} [x] </tool_calls> "
                                       "[BEGIN FINAL RESPONSE] 🙂"})),
        reasoning="The user wants two things.", vocab="qwen2", thinking_open=True,
        forced='<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
               "</tool_calls>",
        id="apriel-1.6", markers=("<tool_calls>", "</tool_calls>", "[BEGIN FINAL RESPONSE]")),
    FamilyCase(
        "apriel", ("Apriel-1.6-15b-Thinker-fixed",),
        "Just a greeting.\n[BEGIN FINAL RESPONSE]\nHello, world!\nWhat's up?",
        content="Hello, world!\nWhat's up?", reasoning="Just a greeting.", thinking_open=True,
        id="apriel-1.6-answer", markers=("[BEGIN FINAL RESPONSE]",)),
    FamilyCase(
        "apriel", ("unsloth-Apriel-1.5",),
        '<tool_calls>[{"name": "get_time", "arguments": {}}]</tool_calls>',
        calls=(("get_time", {}),), vocab="qwen2", id="apriel-1.5",
        markers=("<tool_calls>", "</tool_calls>")),
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
        forced='<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
               '<|open|>json type="object"<|sep|>{"city": "Paris"}<|close|>json<|sep|>'
               "<|close|>call<|sep|><|close|>tools<|sep|>",
        markers=("<|open|>", "<|close|>", "<|sep|>")),
    FamilyCase(
        "qwen3_coder", ("Qwen3-Coder",),
        "Checking both.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=write_note>\n<parameter=text>\n" + TRICKY + " </parameter> "
        "<function=x>\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n"
        "</function>\n</tool_call>",
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": TRICKY + " </parameter> <function=x>",
                               "tags": ["a", "b"]})),
        content="Checking both.", vocab="qwen2",
        forced="<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
               "</function>\n</tool_call>",
        id="qwen3-coder", markers=("<tool_call>", "<function=", "<parameter=")),
    FamilyCase(
        "qwen3_coder", ("Qwen3.5-4B", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                        "StepFun3.5-Flash"),
        "The user wants Paris.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nZürich {x} \"y\"\n</parameter>\n<parameter=unit>\ncelsius\n"
        "</parameter>\n</function>\n</tool_call>",
        calls=(("get_weather", {"city": "Zürich {x} \"y\"", "unit": "celsius"}),),
        reasoning="The user wants Paris.", vocab="qwen35", thinking_open=True,
        forced="<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
               "</function>\n</tool_call>",
        id="qwen3.5-thinking",
        markers=("<tool_call>", "</tool_call>", "<think>", "</think>", "<function=")),
    FamilyCase(
        "qwen3_coder", ("Qwen3-Coder",),
        "Sure.\n<function=get_weather>\n<parameter=city>\nParis\n"
        "</parameter>\n</function>\n</tool_call>\n<function=get_time>\n</function>",
        calls=(("get_weather", {"city": "Paris"}), ("get_time", {})),
        content="Sure.", vocab="qwen2",
        id="qwen3-coder-without-tool-call", markers=("</tool_call>", "<parameter=")),
    FamilyCase(
        "qwen3_coder", ("Qwen3-Coder",),
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n"
        "</tool_call>",
        content="<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n"
                "</tool_call>",
        id="qwen3-coder-malformed-is-text"),
    FamilyCase(
        "seed_oss", ("ByteDance-Seed-OSS",),
        "<seed:think>Paris, then a note.</seed:think>\n<seed:tool_call>\n<function=get_weather>"
        "\n<parameter=city>Paris</parameter>\n<parameter=days>3</parameter>\n</function>\n"
        "</seed:tool_call>\n<seed:tool_call>\n<function=write_note>\n<parameter=text>" + TRICKY
        + " </seed:tool_call> </parameter> x</parameter>\n</function>\n</seed:tool_call>",
        calls=(("get_weather", {"city": "Paris", "days": 3}),
               ("write_note", {"text": TRICKY + " </seed:tool_call> </parameter> x"})),
        reasoning="Paris, then a note.",
        forced="<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
               "</function>\n</seed:tool_call>",
        markers=("<seed:tool_call>", "<seed:think>", "</seed:think>", "<function=")),
    FamilyCase(
        "glm", ("GLM-4.6", "inclusionai-ling-3.0-flash"),
        "\n<think>Two calls.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
        "<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n"
        "</tool_call>\n<tool_call>write_note\n<arg_key>text</arg_key>\n<arg_value>" + TRICKY
        + " <arg_key>k</arg_key> </arg_value> y</arg_value>\n<arg_key>tags</arg_key>\n"
        "<arg_value>[\"x\"]</arg_value>\n</tool_call>\n<tool_call>get_time\n</tool_call>",
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": TRICKY + " <arg_key>k</arg_key> </arg_value> y",
                               "tags": ["x"]}),
               ("get_time", {})),
        reasoning="Two calls.",
        forced="<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
               "</tool_call>",
        id="glm-4.6", markers=("<tool_call>", "<think>", "</think>", "<arg_value>")),
    FamilyCase(
        "glm", ("GLM-4.7-Flash", "Spark2.5"),
        "Weighing it.</think><tool_call>get_weather<arg_key>city</arg_key>"
        "<arg_value>Zürich {\"a\": 1}</arg_value><arg_key>unit</arg_key>"
        "<arg_value>celsius</arg_value></tool_call>",
        calls=(("get_weather", {"city": "Zürich {\"a\": 1}", "unit": "celsius"}),),
        reasoning="Weighing it.", thinking_open=True,
        forced="<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
               "</tool_call>",
        id="glm-4.7", markers=("<tool_call>", "</tool_call>", "<think>", "</think>")),
    FamilyCase(
        "minimax_m2", ("MiniMax-M2",),
        "Looking up.\n</think>\n\nOne moment.\n<minimax:tool_call>\n"
        "<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n"
        "<parameter name=\"days\">2</parameter>\n</invoke>\n<invoke name=\"write_note\">\n"
        "<parameter name=\"text\">" + TRICKY + " </minimax:tool_call> </parameter> z"
        "</parameter>\n</invoke>\n</minimax:tool_call>",
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": TRICKY + " </minimax:tool_call> </parameter> z"})),
        content="One moment.", reasoning="Looking up.", thinking_open=True,
        forced="<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
               "<parameter name=\"city\">Paris</parameter>\n</invoke>\n</minimax:tool_call>",
        markers=("<minimax:tool_call>", "</minimax:tool_call>", "<invoke", "</think>")),
    FamilyCase(
        "deepseek_dsml", ("deepseek-ai-DeepSeek-V3.2",),
        "Both.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"days\" string=\"false\">2</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"write_note\">\n"
        "<｜DSML｜parameter name=\"text\" string=\"true\">" + TRICKY
        + " </｜DSML｜function_calls> 12</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"tags\" string=\"false\">[\"a\"]</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        calls=(("get_weather", {"city": "Paris", "days": 2}),
               ("write_note", {"text": TRICKY + " </｜DSML｜function_calls> 12",
                               "tags": ["a"]})),
        content="Both.", vocab="deepseek-llm",
        forced="<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
               "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
               "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        id="deepseek-v3.2", markers=("｜DSML｜", "</think>")),
    FamilyCase(
        "deepseek_dsml", ("deepseek-ai-DeepSeek-V4", "deepseek-ai-DeepSeek-V4-Flash-0731"),
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_time\">\n\n</｜DSML｜invoke>\n"
        "<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Zürich \"x\"</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        calls=(("get_time", {}), ("get_weather", {"city": "Zürich \"x\""})),
        vocab="deepseek-llm",
        forced="<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
               "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
               "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        id="deepseek-v4", markers=("｜DSML｜",)),
    FamilyCase(
        "minimax_m3", ("MiniMax-M3",),
        "<mm:think>Two calls.</mm:think>Sure.\n]<]minimax[>[<tool_call>\n"
        "]<]minimax[>[<invoke name=\"get_weather\">]<]minimax[>[<city>" + TRICKY
        + " <city>]<]minimax[>[</city>]<]minimax[>[<days>2]<]minimax[>[</days>"
        "]<]minimax[>[</invoke>\n]<]minimax[>[<invoke name=\"write_note\">"
        "]<]minimax[>[<text>hi]<]minimax[>[</text>]<]minimax[>[<tags>]<]minimax[>[<item>a"
        "]<]minimax[>[</item>]<]minimax[>[<item>b]<]minimax[>[</item>]<]minimax[>[</tags>"
        "]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
        calls=(("get_weather", {"city": TRICKY + " <city>", "days": 2}),
               ("write_note", {"text": "hi", "tags": ["a", "b"]})),
        content="Sure.", reasoning="Two calls.",
        forced="]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"get_weather\">"
               "]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[</invoke>\n"
               "]<]minimax[>[</tool_call>",
        markers=("]<]minimax[>[", "<mm:think>", "</mm:think>", "<invoke")),
]
