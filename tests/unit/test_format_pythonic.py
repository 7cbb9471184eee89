"""Pythonic calls (backends.chat_format.pythonic) and the Llama 4 family that reads them
besides its JSON calls: only literal keyword arguments make calls, never anything evaluated;
a malformed, unknown, cut or hostile block comes back as text or nothing, never a crash."""

from __future__ import annotations

import json

import pytest

from backends.base import GenerationRequest, Message, TokenEvent, ToolCallEvent
from backends.chat_format.pythonic import bracket_end, list_end, read_calls
from tests.support.families import chat
from tests.support.family_cases import TOOLS

LLAMA4 = "meta-llama-Llama-4-Scout-17B-16E-Instruct"


def run(output: str, pieces: int = 4, template: str = LLAMA4):
    messages = (Message("user", "Weather in Paris?"),)
    request = GenerationRequest(messages=messages, tools=TOOLS)
    ct = chat(template)
    parser = ct.parser(request, ct.render(messages, request))
    events = []
    for i in range(0, len(output), pieces):
        events += parser.feed(output[i:i + pieces])
    events += parser.finish()
    text = "".join(e.text for e in events if isinstance(e, TokenEvent))
    names = [e.name for e in events if isinstance(e, ToolCallEvent) and e.name]
    args = [json.loads(e.arguments) for e in events
            if isinstance(e, ToolCallEvent) and e.arguments]
    return text, list(zip(names, args, strict=True)), parser.cut_call


@pytest.mark.parametrize(("text", "calls"), [
    ("[get_weather(city='LA'), get_time()]", [("get_weather", {"city": "LA"}), ("get_time", {})]),
    ('[f(a=[1, -2.5, {"k": (1, 2)}], b=True, c=None, d=true, e=null, g="x\\ny")]',
     [("f", {"a": [1, -2.5, {"k": [1, 2]}], "b": True, "c": None, "d": True, "e": None,
             "g": "x\ny"})]),
    ("[Calendar.create_event(title='demo')]", [("Calendar.create_event", {"title": "demo"})]),
    ("[f(s='a' 'b', n=+3)]", [("f", {"s": "ab", "n": 3})]),
])
def test_literal_keyword_arguments_are_read(text, calls):
    got = read_calls(text)
    assert got is not None
    assert [(c.name, c.arguments) for c in got] == calls


@pytest.mark.parametrize("text", [
    "[f(1)]", "[f(**k)]", "[f(a=b)]", "[f(a=1+2)]", "[f(a=1j)]", "[f(a=b'x')]", "[f(a={1})]",
    "[f(a=1, a=2)]", "[f(a=f'{x}')]", "[f(a=1e999)]", "[f(a=-'x')]", "[f(a={1: 2})]",
    "f(a=1)", "[]", "[1, 2]", "[__import__('os').system('echo')]", "[f()()]",
    "[f(a=(yield))]", "[f(a=lambda: 1)]", "[f(a=[x for x in y])]", "[f(a=1)] + [g()]",
    "[f(a=1", "",
])
def test_anything_but_a_list_of_literal_calls_is_not_calls(text):
    assert read_calls(text) is None


def test_names_not_offered_are_not_calls():
    assert read_calls("[rm(path='/')]", {"get_weather"}) is None


def test_deep_nesting_and_huge_input_do_not_blow_up():
    deep = "[f(a=" + "[" * 100_000 + "]" * 100_000 + ")]"
    assert read_calls(deep) is None
    assert bracket_end(deep) == len(deep)
    big = "x" * 1_000_000
    calls = read_calls(f"[write_note(text='{big}')]")
    assert calls is not None and calls[0].arguments == {"text": big}


def test_where_a_list_ends_skips_brackets_in_strings():
    text = "[f(a='])\\'}', b=\"[(\")] and then"
    assert bracket_end(text) == text.index(" and")
    assert list_end("[Note: a plain answer", False) == 0
    assert list_end("[get", False) is None  # may still become a call
    assert list_end("[get_weather(city='Pa", False) is None


@pytest.mark.parametrize("output", [
    "[get_weather(city=)]",  # not Python
    "[delete_everything(path='/')]",  # no such tool
    "[get_weather('Paris')]",  # positional
    '{"name": "nope", "parameters": {}}',
    '{"name": "get_weather", "parameters": "Paris"}',
])
def test_llama4_a_block_it_cannot_read_is_answer_text(output):
    text, calls, cut = run(output)
    assert calls == [] and text == output and not cut


def test_llama4_text_before_a_call_keeps_it_text():
    output = "Sure: [get_weather(city='Paris')]"
    assert run(output)[:2] == (output, [])


def test_llama4_a_cut_call_is_never_reported_nor_shown():
    for output in ("[get_weather(city='Par", '{"name": "get_weather", "parameters": {"ci',
                   '{"name": "get_time", "parameters": {}}{"name": "get_wea'):
        text, calls, cut = run(output, pieces=3)
        assert (text, calls, cut) == ("", [], True)


def test_llama4_calls_after_python_start_and_a_hostile_nesting():
    text, calls, _ = run("<|python_start|>[get_time()]<|python_end|>\n", pieces=1)
    assert (text, calls) == ("", [("get_time", {})])
    deep = "[get_weather(city=" + "[" * 5000 + "]" * 5000 + ")]"
    text, calls, cut = run(deep, pieces=64)
    assert calls == [] and text == deep and not cut


def test_llama4_parallel_grammar_takes_calls_back_to_back():
    from backends.grammar import Constraint, vocab_from_llama
    from backends.grammar.lark import Answer, grammar_text
    from tests.support.family_cases import TIME, WEATHER
    from tests.support.token_stream import load_vocab

    model = load_vocab("llama-bpe").model
    vocab = vocab_from_llama(model.vocab, model.n_vocab())
    fmt = chat(LLAMA4).fmt
    answer = Answer(tools=(WEATHER, TIME), choice="required", parallel=True)
    constraint = Constraint(vocab, grammar_text(answer, fmt, "after", vocab))
    forced = ('{"name": "get_weather", "parameters": {"city": "Paris"}}'
              '{"name": "get_time", "parameters": {}}')
    ids = vocab.tokenizer.tokenize_str(forced, parse_special=True)
    assert constraint.valid_prefix(ids) == len(ids)
    assert constraint.matcher.consume_tokens(ids) and constraint.matcher.is_accepting()
    assert run(forced)[1] == [("get_weather", {"city": "Paris"}), ("get_time", {})]


LFM2 = "LFM2-8B-A1B"


def test_lfm2_writes_earlier_calls_into_the_turn_as_its_model_does():
    from backends.base import ToolCall

    messages = (Message("user", "Weather in Paris?"),
                Message("assistant", "Checking.", tool_calls=(
                    ToolCall("call_p", "get_weather", '{"city": "Paris", "days": 2}'),
                    ToolCall("call_n", "write_note", '{"text": "a\\"b", "tags": [], "x": true}'))),
                Message("tool", "18 degrees", tool_call_id="call_p"))
    request = GenerationRequest(messages=messages, tools=TOOLS)
    prompt = chat(LFM2).render(messages, request)
    assert ('<|im_start|>assistant\nChecking.<|tool_call_start|>[get_weather(city="Paris", '
            'days=2), write_note(text="a\\"b", tags=[], x=True)]<|tool_call_end|><|im_end|>'
            in prompt)
    assert "<|tool_response_start|>18 degrees<|tool_response_end|>" in prompt


@pytest.mark.parametrize("output", [
    "<|tool_call_start|>[get_weather(city=Paris)]<|tool_call_end|>",
    "<|tool_call_start|>[launch(code=1)]<|tool_call_end|>",
    "<|tool_call_start|>not a list<|tool_call_end|>",
])
def test_lfm2_a_block_it_cannot_read_is_shown_as_it_was(output):
    text, calls, cut = run(output, template=LFM2)
    assert (text, calls, cut) == (output, [], False)


def test_lfm2_a_stray_closer_is_dropped_and_a_cut_block_never_shown():
    assert run("Done.<|tool_call_end|> Bye.", template=LFM2)[:2] == ("Done.Bye.", [])
    text, calls, cut = run("Ok.<|tool_call_start|>[get_weather(city='Par", template=LFM2)
    assert (text, calls, cut) == ("Ok.", [], True)


def test_lfm2_grammar_takes_parallel_calls_with_optional_arguments():
    from backends.grammar import Constraint, vocab_from_llama
    from backends.grammar.lark import Answer, grammar_text
    from tests.support.token_stream import load_vocab

    model = load_vocab("qwen2").model
    vocab = vocab_from_llama(model.vocab, model.n_vocab())
    fmt = chat(LFM2).fmt
    answer = Answer(tools=TOOLS, choice="required", parallel=True)
    forced = ('<|tool_call_start|>[get_weather(city="Paris", unit="celsius"), get_time(), '
              'write_note(text="x", tags=["a", "b"])]<|tool_call_end|>')
    for text, ok in ((forced, True), (forced.replace('city="Paris", ', ""), False),
                     (forced.replace("get_time()", "get_time(x=1)"), False)):
        constraint = Constraint(vocab, grammar_text(answer, fmt, "after", vocab))
        ids = vocab.tokenizer.tokenize_str(text, parse_special=True)
        took = constraint.valid_prefix(ids) == len(ids)
        assert (took and constraint.matcher.consume_tokens(ids)
                and constraint.matcher.is_accepting()) == ok, text
    assert run(forced, template=LFM2)[1] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}), ("get_time", {}),
        ("write_note", {"text": "x", "tags": ["a", "b"]})]


def test_a_long_argument_streamed_in_small_pieces_does_not_cost_its_length_squared():
    import time

    big = "ab c" * 50_000  # 200 kB: read whole at every piece, this would take minutes
    started = time.monotonic()
    text, calls, _ = run(f"[write_note(text='{big}')]", pieces=4)
    assert calls == [("write_note", {"text": big})] and text == ""
    assert time.monotonic() - started < 30
