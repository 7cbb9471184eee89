"""Cohere's action blocks (Command R7B, Cohere2 MoE), Functionary v3.1's `<function=..>`
tags, Apertus' tool lists, MiniCPM 5's XML calls and Granite 3's lists: a block it cannot
read is shown as the text it was, a cut one is never reported, the answer markers never
reach the answer, and hostile nesting does not blow up."""

from __future__ import annotations

import pytest

from tests.support.families import chat
from tests.unit.test_format_pythonic import run

R7B = "CohereForAI-c4ai-command-r7b-12-2024-tool_use"


@pytest.mark.parametrize("output", [
    '<|START_ACTION|>[{"tool_name": "launch", "parameters": {}}]<|END_ACTION|>',
    '<|START_ACTION|>[{"tool_name": "get_weather", "parameters": [1]}]<|END_ACTION|>',
    '<|START_ACTION|>{"tool_name": "get_weather"}<|END_ACTION|>',
    "<|START_ACTION|>[" + "[" * 50_000 + "]" * 50_000 + "]<|END_ACTION|>",
])
def test_an_action_it_cannot_read_is_shown_as_it_was(output):
    text, calls, cut = run(output, pieces=4096, template=R7B)
    assert (text, calls, cut) == (output, [], False)


def test_thinking_then_a_response_and_a_cut_action():
    text, calls, cut = run("<|START_THINKING|>Easy.<|END_THINKING|><|START_RESPONSE|>Hi!"
                           "<|END_RESPONSE|>", template=R7B)
    assert (text, calls, cut) == ("Hi!", [], False)
    text, calls, cut = run('<|START_ACTION|>[{"tool_name": "get_weather", "parameters": {"ci',
                           template=R7B)
    assert (text, calls, cut) == ("", [], True)


def test_an_action_without_its_closer_still_counts_at_the_end():
    text, calls, _ = run('<|START_ACTION|>[{"tool_name": "get_time", "parameters": {}}]',
                         template=R7B)
    assert (text, calls) == ("", [("get_time", {})])


FUNCTIONARY = "meetkai-functionary-medium-v3.1"


@pytest.mark.parametrize("output", [
    "<function=launch>{}</function>",
    '<function=get_weather>["Paris"]</function>',
    "<function=get_weather>{oops}</function>",
])
def test_functionary_v3_1_a_call_it_cannot_read_is_shown_as_it_was(output):
    assert run(output, template=FUNCTIONARY) == (output, [], False)


def test_functionary_v3_1_cut_calls_and_a_tag_that_is_no_call():
    assert run('<function=get_weather>{"city": "Pa', template=FUNCTIONARY) == ("", [], True)
    text, calls, _ = run("Use <function= tags. <function=get_time>{}</function>",
                         template=FUNCTIONARY)
    assert calls == [("get_time", {})] and text.startswith("Use") and "tags." in text


APERTUS = "Apertus-8B-Instruct"


@pytest.mark.parametrize("output", [
    '<|tools_prefix|>[{"get_weather": {"city": "Paris"}, "get_time": {}}]<|tools_suffix|>',
    '<|tools_prefix|>[{"launch": {}}]<|tools_suffix|>',
    '<|tools_prefix|>[{"get_weather": "Paris"}]<|tools_suffix|>',
])
def test_apertus_a_list_it_cannot_read_is_shown_as_it_was(output):
    assert run(output, template=APERTUS) == (output, [], False)


MINICPM = "openbmb-MiniCPM5-1B"


@pytest.mark.parametrize("output", [
    '<function name="launch"></function>',
    '<function name="get_weather"><oops/></function>',
    '<function name="get_weather"><param name="city"><![CDATA[x]]>y</param></function>',
])
def test_minicpm5_a_call_it_cannot_read_is_text(output):
    text, calls, cut = run(output, template=MINICPM)
    assert calls == [] and not cut
    assert ("launch" if "launch" in output else "get_weather") in text


def test_minicpm5_a_cut_call_is_never_shown_and_values_are_typed():
    assert run('<function name="get_weather"><param name="city">Par', template=MINICPM) \
        == ("", [], True)
    text, calls, _ = run('<function name="get_weather"><param name="city">12</param>'
                         '<param name="days">3</param></function>', template=MINICPM)
    assert calls == [("get_weather", {"city": "12", "days": 3})]


@pytest.mark.parametrize(("template", "output", "start"), [
    ("Apriel-1.6-15b-Thinker-fixed", 'Hmm.\n[BEGIN FINAL RESPONSE]\n<tool_calls>[{"name": '
     '"get_weather", "arguments": {"city": "Paris"}}]</tool_calls>', "inside"),
    ("Cohere2MoE", 'Hmm.<|END_THINKING|><|START_ACTION|>[{"tool_name": "get_weather", '
     '"parameters": {"city": "Paris"}}]<|END_ACTION|>', "inside"),
    ("NVIDIA-Nemotron-Nano-v2", 'Hmm.\n</think>\n<TOOLCALL>[{"name": "get_weather", '
     '"arguments": {"city": "Paris"}}]</TOOLCALL>', "inside"),
    (MINICPM, '<think>\nHmm.\n</think>\n\n<function name="get_weather"><param name="city">'
     "Paris</param></function>", "maybe"),
])
@pytest.mark.parametrize("choice", ["required", "auto"])
def test_the_grammar_takes_a_call_after_the_family_s_own_thinking(template, output, start,
                                                                  choice):
    from backends.grammar import Constraint, vocab_from_llama
    from backends.grammar.lark import Answer, grammar_text
    from tests.support.family_cases import WEATHER
    from tests.support.token_stream import load_vocab

    model = load_vocab("qwen2").model
    vocab = vocab_from_llama(model.vocab, model.n_vocab())
    answer = Answer(tools=(WEATHER,), choice=choice, parallel=True)
    constraint = Constraint(vocab, grammar_text(answer, chat(template).fmt, start, vocab))
    ids = vocab.tokenizer.tokenize_str(output, parse_special=True)
    assert constraint.valid_prefix(ids) == len(ids)
    assert constraint.matcher.consume_tokens(ids) and constraint.matcher.is_accepting()


GRANITE = "ibm-granite-granite-3.3-2B-Instruct"


def test_granite_3_thinking_is_switched_by_its_own_variable():
    from backends.base import GenerationRequest, Message, Thinking

    ct, messages = chat(GRANITE), (Message("user", "Hi"),)
    assert ct.fmt.thinking_toggle
    on = ct.render(messages, GenerationRequest(messages=messages,
                                               thinking=Thinking(enabled=True)))
    off = ct.render(messages, GenerationRequest(messages=messages))
    assert "<think></think>" in on and "<think>" not in off


@pytest.mark.parametrize("output", [
    '<|tool_call|>[{"name": "launch", "arguments": {}}]',
    '<|tool_call|>[{"name": "get_weather", "arguments": "Paris"}]',
])
def test_granite_3_a_list_it_cannot_read_is_shown_as_it_was(output):
    assert run(output, template=GRANITE) == (output, [], False)


def test_granite_3_a_cut_list_is_never_shown_and_text_may_follow_a_list():
    assert run('<|tool_call|>[{"name": "get_time", "argu', template=GRANITE) == ("", [], True)
    text, calls, _ = run('<|tool_call|>[{"name": "get_time", "arguments": {}}] Done.',
                         template=GRANITE)
    assert (text, calls) == ("Done.", [("get_time", {})])
