"""Any split of the output gives the same answer: text arrives in pieces of any size (a
marker in several), and the parser holds back only what might still be a marker."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from backends.base import ReasoningEvent, TokenEvent, ToolCallEvent
from backends.chat_format import detect_format, make_parser
from tests.support.families import chat

OUTPUTS = {
    "Qwen-Qwen3-0.6B": ("<think>\nWeather and time? Use </tool_call> wisely.\n</think>\n\n"
                        "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                        "{\"city\": \"Zürich <tool_call>\\\"}\"}}\n</tool_call>\n<tool_call>\n"
                        "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"),
    "openai-gpt-oss-120b": ("<|channel|>analysis<|message|>Think 🌧.<|end|><|start|>assistant"
                            "<|channel|>commentary to=functions.get_weather <|constrain|>json"
                            "<|message|>{\"city\": \"<|end|>\"}<|call|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("Sure. [TOOL_CALLS][{\"name\": \"get_weather\", "
                                             "\"arguments\": {\"city\": \"]}\"}, \"id\": "
                                             "\"abcdefghi\"}]"),
    "google-gemma-2-2b-it": ("[TOOL_REQUEST]{\"name\": \"get_time\", \"arguments\": {}}"
                             "[END_TOOL_REQUEST]"),
}


def parse(name: str, pieces: list[str]) -> tuple[str, str, list[tuple[str, str]]]:
    fmt = detect_format(chat(name).source)
    parser = make_parser(fmt, tools_offered=True)
    events = [e for piece in pieces for e in parser.feed(piece)] + parser.finish()
    text = "".join(e.text for e in events if isinstance(e, TokenEvent))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningEvent))
    calls: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, ToolCallEvent):
            call = calls.setdefault(e.index, ["", ""])
            call[0] += e.name
            call[1] += e.arguments
    return text, reasoning, [(n, a) for n, a in calls.values()]


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(OUTPUTS)), cuts=st.lists(st.integers(0, 10_000),
                                                             max_size=40))
def test_every_split_of_the_output_parses_the_same(name, cuts):
    whole = parse(name, [OUTPUTS[name]])
    assert parse(name, split(OUTPUTS[name], cuts)) == whole
    assert parse(name, list(OUTPUTS[name])) == whole  # one character at a time
    assert whole[2] and all(json.loads(args) is not None for _, args in whole[2])


def test_the_whole_outputs_parse_as_the_model_meant():
    assert parse("Qwen-Qwen3-0.6B", [OUTPUTS["Qwen-Qwen3-0.6B"]]) == (
        "Checking.", "Weather and time? Use </tool_call> wisely.",
        [("get_weather", '{"city": "Zürich <tool_call>\\"}"}'), ("get_time", "{}")])
    assert parse("openai-gpt-oss-120b", [OUTPUTS["openai-gpt-oss-120b"]]) == (
        "", "Think 🌧.", [("get_weather", '{"city": "<|end|>"}')])
    assert parse("mistralai-Mistral-Nemo-Instruct-2407",
                 [OUTPUTS["mistralai-Mistral-Nemo-Instruct-2407"]]) == (
        "Sure.", "", [("get_weather", '{"city": "]}"}')])
