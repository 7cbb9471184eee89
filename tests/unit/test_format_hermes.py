"""Hermes-style tool calls (`<tool_call>` JSON) and `<think>`: Qwen2.5(-Coder) and Qwen3,
through their real chat templates and the real Qwen2 vocabulary (llama.cpp's vendored
copies)."""

import json
import re

import pytest

from backends.base import (
    GenerationRequest,
    Message,
    ReasoningEvent,
    Thinking,
    TokenEvent,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
)
from backends.chat_format import detect_format
from backends.chat_format.render import ChatTemplate
from tests.support.llama_sdist import template
from tests.support.token_stream import WEATHER, replay

QWEN25 = "Qwen-Qwen2.5-7B-Instruct"
QWEN3 = "Qwen-Qwen3-0.6B"
MARKERS = ("<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_end|>")
CALL_ID = re.compile(r"^call_[A-Za-z0-9]{24}$")
PARIS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def qwen(name: str = QWEN25) -> ChatTemplate:
    return ChatTemplate(template(name), eos_text="<|im_end|>")


def conversation(reasoning: str = "") -> tuple[Message, ...]:
    return (Message("system", "Be brief."), Message("user", "Weather in Paris?"),
            Message("assistant", "", reasoning=reasoning,
                    tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
            Message("tool", "18°C", tool_call_id="call_1"))


def assert_clean(done) -> None:
    """No marker in the answer, the thinking, a tool's name or its arguments."""
    for text in (done.text, done.reasoning,
                 *(c.name for c in done.tool_calls), *(c.arguments for c in done.tool_calls)):
        for marker in MARKERS:
            assert marker not in text, text


def test_qwen_templates_are_hermes_and_qwen3_thinks_with_a_switch():
    q25, q3 = detect_format(template(QWEN25)), detect_format(template(QWEN3))
    assert (q25.tools, q25.native_tools, q25.thinking) == ("hermes", True, None)
    assert q3.tools == "hermes" and q3.thinking is not None and q3.thinking_toggle
    assert q3.thinking.open == "<think>" and "<tool_call>" in q3.special_markers


def test_qwen25_renders_tools_the_call_as_an_object_and_the_result():
    req = GenerationRequest(messages=conversation(), tools=(WEATHER,))
    prompt = qwen().render(conversation(), req)
    tools = prompt.split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(tools)["function"]["name"] == "get_weather"
    assert "<|im_start|>assistant\n" + PARIS + "<|im_end|>" in prompt
    assert "<|im_start|>user\n<tool_response>\n18°C\n</tool_response><|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_tool_choice_none_renders_no_tools():
    req = GenerationRequest(messages=conversation(), tools=(WEATHER,),
                            tool_choice=ToolChoice("none"))
    assert "<tools>" not in qwen().render(conversation(), req)


def test_qwen3_gets_reasoning_back_and_a_thinking_switch():
    msgs = conversation(reasoning="The user wants weather.")
    on = qwen(QWEN3).render(msgs, GenerationRequest(messages=msgs, tools=(WEATHER,)))
    assert ("<|im_start|>assistant\n<think>\nThe user wants weather.\n</think>\n\n"
            + PARIS) in on
    assert on.endswith("<|im_start|>assistant\n")
    off = qwen(QWEN3).render(msgs, GenerationRequest(messages=msgs,
                                                     thinking=Thinking(enabled=False)))
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_one_call_streams_id_and_name_once_then_the_arguments():
    run = replay(qwen(), "qwen2", PARIS)
    calls = [e for e in run.streamed if isinstance(e, ToolCallEvent)]
    assert CALL_ID.match(calls[0].id) and calls[0].name == "get_weather"
    assert all(not e.id and not e.name for e in calls[1:])
    assert "".join(e.arguments for e in calls) == '{"city": "Paris"}'
    assert not [e for e in run.streamed if isinstance(e, TokenEvent | ReasoningEvent)]
    done = run.done
    assert done.stats.finish_reason == "tool_calls" and done.text == ""
    assert done.tool_calls[0].id == calls[0].id
    assert json.loads(done.tool_calls[0].arguments) == {"city": "Paris"}


def test_qwen3_thinks_then_says_a_word_then_calls_two_tools_in_parallel():
    output = ("<think>\nThe user wants the weather and the time.\n</think>\n\n"
              "Checking both.\n" + PARIS + "\n"
              '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    run = replay(qwen(QWEN3), "qwen2", output)
    done = run.done
    assert done.reasoning == "The user wants the weather and the time."
    assert done.text == "Checking both."
    assert [c.name for c in done.tool_calls] == ["get_weather", "get_time"]
    assert [json.loads(c.arguments) for c in done.tool_calls] == [{"city": "Paris"}, {}]
    assert len({c.id for c in done.tool_calls}) == 2
    indexes = [e.index for e in run.streamed if isinstance(e, ToolCallEvent)]
    assert indexes == sorted(indexes) and set(indexes) == {0, 1}
    kinds = [type(e).__name__ for e in run.streamed]
    assert kinds.index("TokenEvent") > max(i for i, k in enumerate(kinds)
                                           if k == "ReasoningEvent")
    assert_clean(done)


def test_markers_braces_and_unicode_inside_an_argument_stay_in_it():
    args = {"city": "Zürich </tool_call> {not a brace} \"quoted\" <tool_call>",
            "note": "東京 🌧 \\ back\\slash", "nested": {"list": [1, {"a": "}"}]}}
    output = ('<tool_call>\n{"name": "get_weather", "arguments": '
              + json.dumps(args, ensure_ascii=False) + "}\n</tool_call>")
    done = replay(qwen(), "qwen2", output).done
    assert done.stats.finish_reason == "tool_calls" and done.text == ""
    assert [json.loads(c.arguments) for c in done.tool_calls] == [args]


def test_arguments_given_as_a_json_string_become_the_object():
    output = ('<tool_call>\n{"name": "get_weather", '
              '"arguments": "{\\"city\\": \\"Paris\\"}"}\n</tool_call>')
    done = replay(qwen(), "qwen2", output).done
    assert json.loads(done.tool_calls[0].arguments) == {"city": "Paris"}


def test_a_call_cut_by_max_tokens_is_never_reported_half_and_no_marker_leaks():
    output = ("Let me look.\n" + PARIS + "\n"
              '<tool_call>\n{"name": "get_time", "arguments": {"zone": "Europe/Paris"}}\n'
              "</tool_call>")
    whole = replay(qwen(), "qwen2", output)
    n = len(whole.pieces)
    for cut in range(n + 1):
        done = replay(qwen(), "qwen2", output, tokens=cut).done
        assert_clean(done)
        assert done.stats.finish_reason == "length"
        for call in done.tool_calls:  # only whole calls are reported
            assert json.loads(call.arguments) in ({"city": "Paris"}, {"zone": "Europe/Paris"})
        assert done.text in ("", "Let me", "Let me look", "Let me look.") or \
            "Let me look.".startswith(done.text)
    assert len(whole.done.tool_calls) == 2


def test_without_tools_offered_a_plain_answer_streams_unchanged():
    req = GenerationRequest(messages=(Message("user", "hi"),))
    run = replay(qwen(), "qwen2", "Hello! 你好 👋\n\nHow can I help?", request=req)
    assert run.done.text == "Hello! 你好 👋\n\nHow can I help?"
    assert run.done.stats.finish_reason == "stop" and not run.done.tool_calls


@pytest.mark.parametrize("enabled", [True, None])
def test_qwen3_thinking_stream_counts_reasoning_tokens(enabled):
    req = GenerationRequest(messages=(Message("user", "2+2?"),),
                            thinking=Thinking(enabled=enabled))
    run = replay(qwen(QWEN3), "qwen2", "<think>\nTwo plus two.\n</think>\n\n4", request=req)
    assert run.done.reasoning == "Two plus two." and run.done.text == "4"
    assert 0 < run.done.stats.reasoning_tokens < run.done.stats.completion_tokens


@pytest.mark.parametrize("output", [
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```',
])
def test_a_bare_or_fenced_call_without_markers_is_a_call(output):
    """What Qwen2.5-Coder-0.5B writes, greedy, to "What's the weather in Paris?"."""
    done = replay(qwen(), "qwen2", output).done
    assert done.stats.finish_reason == "tool_calls" and done.text == ""
    assert [json.loads(c.arguments) for c in done.tool_calls] == [{"city": "Paris"}]


def test_a_bare_json_answer_naming_no_offered_tool_stays_the_answer():
    output = '{"name": "Ada", "born": 1815}'
    done = replay(qwen(), "qwen2", output).done
    assert done.text == output and not done.tool_calls
    assert done.stats.finish_reason == "stop"
