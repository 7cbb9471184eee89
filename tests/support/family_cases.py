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
