"""The families whose calls are a name and JSON arguments between special markers (Mistral
2025, DeepSeek, Kimi K2) and Gemma 4: what the conformance cases do not show, that hostile
output is text (never a crash, never a lost answer), a cut call is never reported, and huge or
deeply nested arguments cost their length."""

from __future__ import annotations

import time

import jsonschema

from backends.base import GenerationRequest, Message
from backends.chat_format.json_extent import JsonCallsEnd, JsonScan
from tests.support.families import chat
from tests.support.family_cases import TOOLS, WEATHER
from tests.unit.test_family_conformance import summary

MINISTRAL = "mistralai-Ministral-3-14B-Reasoning-2512"


def run(template: str, pieces: list[str]):
    messages = (Message("user", "Weather in Paris?"),)
    request = GenerationRequest(messages=messages, tools=TOOLS)
    ct = chat(template)
    parser = ct.parser(request, ct.render(messages, request))
    events = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    return summary(events), parser.cut_call  # a block parser never reports a cut call


def by_char(text: str) -> list[str]:
    return list(text)


# -- the JSON scan -------------------------------------------------------------------------
def test_the_scan_finds_a_value_s_end_past_strings_escapes_and_nesting():
    text = '{"a": "}\\"{", "b": [1, {"c": "]"}]} tail'
    for size in (1, 2, 5, len(text)):
        scan, pos = JsonScan(), 0
        for end in range(size, len(text) + size, size):
            pos = scan.advance(text[:end], pos)
            if scan.done:
                break
        assert scan.done and text[:pos].endswith("]}")


def test_the_scan_calls_what_is_no_object_bad():
    scan = JsonScan()
    assert scan.advance("  hello", 0) == 2 and scan.bad


def test_a_close_marker_inside_a_value_does_not_end_the_block():
    end = JsonCallsEnd(("<sep>",), "<end>")
    text = 'f<sep>{"a": "<end>"}<end>rest'
    assert end(text, False) == len(text) - len("rest")


# -- Mistral 2025 --------------------------------------------------------------------------
def test_mistral_a_head_that_is_no_call_is_text():
    (content, _, calls), cut = run(MINISTRAL, ["[TOOL_CALLS]hello there, no call"])
    assert calls == () and not cut
    assert content == "[TOOL_CALLS]hello there, no call"


def test_mistral_arguments_that_are_no_object_are_text():
    (content, _, calls), _ = run(MINISTRAL, ["[TOOL_CALLS]get_time[ARGS]nope"])
    assert calls == () and content.startswith("[TOOL_CALLS]get_time[ARGS]")


def test_mistral_a_call_cut_off_is_never_reported():
    out = '[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{"city": "Par'
    (content, _, calls), cut = run(MINISTRAL, by_char(out))
    assert calls == (("get_time", {}),) and cut and content == ""


def test_mistral_deep_nesting_and_huge_arguments_do_not_blow_up():
    deep = "[TOOL_CALLS]write_note[ARGS]" + "[" * 100_000 + "]" * 100_000
    (content, _, calls), _ = run(MINISTRAL, [deep])
    assert calls == () and content.startswith("[TOOL_CALLS]")
    big = '[TOOL_CALLS]write_note[ARGS]{"text": "' + "x{" * 50_000 + '"}'
    started = time.monotonic()
    (_, _, calls), _ = run(MINISTRAL, [big[i:i + 4] for i in range(0, len(big), 4)])
    assert calls == (("write_note", {"text": "x{" * 50_000}),)
    assert time.monotonic() - started < 10


# -- DeepSeek ------------------------------------------------------------------------------
V31, R1 = "deepseek-ai-DeepSeek-V3.1", "llama-cpp-deepseek-r1"
BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"


def test_deepseek_a_block_that_holds_no_call_is_text():
    out = f"Hi{BEGIN}not a call{END}bye"
    (content, _, calls), cut = run(V31, by_char(out))
    assert calls == () and not cut and content == out


def test_deepseek_reads_either_shape_whichever_template():
    v3 = f'{BEGIN}<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{{}}<｜tool▁call▁end｜>{END}'
    r1 = (f"{BEGIN}<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{{}}```"
          f"<｜tool▁call▁end｜>{END}")
    for template in (V31, R1):
        for out in (v3, r1):
            thinking = "</think>" if template == R1 else ""
            (_, _, calls), _ = run(template, [thinking + out])
            assert calls == (("get_time", {}),), (template, out)


def test_deepseek_a_block_cut_off_is_never_reported():
    out = (f'{BEGIN}<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{{}}<｜tool▁call▁end｜>'
           '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Pa')
    (content, _, calls), cut = run(V31, by_char(out))
    assert calls == () and cut and content == ""


def test_deepseek_deep_nesting_is_text_not_a_crash():
    out = f"{BEGIN}<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>" + "[" * 50_000 + "]" * 50_000 \
        + f"<｜tool▁call▁end｜>{END}"
    (content, _, calls), _ = run(V31, [out])
    assert calls == () and content.startswith(BEGIN)


def test_r1_distill_templates_stay_generic():
    for name in ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                 "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"):
        assert chat(name).fmt.tools == "generic"


# -- Kimi K2 -------------------------------------------------------------------------------
K2 = "Kimi-K2-Thinking"
SECTION, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def test_kimi_a_section_that_holds_no_call_is_text():
    out = f"Hm{SECTION}<|tool_call_begin|>functions.get_time:0 oops{SECTION_END}"
    (content, _, calls), cut = run(K2, by_char(out))
    assert calls == () and not cut and content == out


def test_kimi_a_section_cut_off_is_never_reported():
    out = (f"{SECTION}<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{{}}"
           "<|tool_call_end|><|tool_call_begin|>functions.get_weather:1"
           '<|tool_call_argument_begin|>{"city": "Par')
    (content, _, calls), cut = run(K2, by_char(out))
    assert calls == () and cut and content == ""


def test_kimi_calls_get_ids_of_kimi_s_shape_and_results_follow():
    from backends.base import ToolCall

    messages = (Message("user", "Hi"),
                Message("assistant", "", tool_calls=(ToolCall("call_a", "get_time", "{}"),)),
                Message("tool", "noon", tool_call_id="call_a"))
    request = GenerationRequest(messages=messages, tools=TOOLS)
    prompt = chat("moonshotai-Kimi-K2").render(messages, request)
    assert "functions.get_time:0<|tool_call_argument_begin|>" in prompt
    assert "## Return of functions.get_time:0" in prompt


def test_a_template_may_queue_items_in_a_list_of_its_own():
    from backends.chat_template import render_chat

    source = ("{%- set q = namespace(ids=[]) -%}{%- for m in messages -%}"
              "{%- set _ = q.ids.append(m.content) -%}{%- endfor -%}{{ q.ids.pop(0) }}")
    assert render_chat(source, [{"role": "user", "content": "a"}]) == "a"


# -- Gemma 4 -------------------------------------------------------------------------------
GEMMA = "google-gemma-4-31B-it"
Q = '<|"|>'


def test_gemma_reads_its_notation_into_json_values():
    from backends.chat_format.families.gemma4 import parse

    block = (f"call:write_note{{text:{Q}a, b: {{c}}{Q},n:-1.5e2,ok:true,none:null,"
             f"tags:[{Q}x{Q},{{k:[1,2]}}],{Q}quoted key{Q}:\"json \\\"s\\\"\"}}<tool_call|>")
    [call] = parse(block, {})
    assert call.arguments == {"text": "a, b: {c}", "n": -150.0, "ok": True, "none": None,
                              "tags": ["x", {"k": [1, 2]}], "quoted key": 'json "s"'}


def test_gemma_a_call_it_cannot_read_is_text():
    for body in ("call:get_time{oops}", "call:get_time{a:x}", "call:get_time", "hello"):
        out = f"<|tool_call>{body}<tool_call|>"
        (content, _, calls), cut = run(GEMMA, by_char(out))
        assert calls == () and not cut and content == out, body


def test_gemma_a_call_cut_off_is_never_reported():
    out = f"<|tool_call>call:get_time{{}}<tool_call|><|tool_call>call:get_weather{{city:{Q}Par"
    (content, _, calls), cut = run(GEMMA, by_char(out))
    assert calls == (("get_time", {}),) and cut and content == ""


def test_gemma_deep_nesting_is_text_not_a_crash():
    out = "<|tool_call>call:write_note{tags:" + "[" * 50_000 + "]" * 50_000 + "}<tool_call|>"
    (content, _, calls), _ = run(GEMMA, [out])
    assert calls == () and content.startswith("<|tool_call>")


def _gemma_constraint(vocab_name: str, parallel: bool = False, start: str = "after"):
    from backends.grammar import Constraint, vocab_from_llama
    from backends.grammar.lark import Answer, grammar_text
    from tests.support.family_cases import WEATHER
    from tests.support.token_stream import load_vocab

    model = load_vocab(vocab_name).model
    vocab = vocab_from_llama(model.vocab, model.n_vocab())
    answer = Answer(tools=(WEATHER, TOOLS[2]), choice="required", parallel=parallel)
    fmt = chat(GEMMA).fmt
    return vocab, lambda: Constraint(vocab, grammar_text(answer, fmt, start, vocab))


def _takes(vocab, make, text: str) -> bool:
    constraint = make()
    ids = vocab.tokenizer.tokenize_str(text, parse_special=True)
    return constraint.valid_prefix(ids) == len(ids) and constraint.matcher.consume_tokens(ids) \
        and constraint.matcher.is_accepting()


def test_gemma_s_grammar_writes_its_calls_with_the_tools_keys_and_types():
    for name in ("gemma-4", "qwen2"):  # its quote a special token, and text
        vocab, make = _gemma_constraint(name)
        assert _takes(vocab, make, f"<|tool_call>call:get_weather{{city:{Q}Paris{Q}}}<tool_call|>")
        assert _takes(vocab, make, f"<|tool_call>call:get_weather{{city:{Q}Zürich {{x}}{Q},"
                                   f"days:3,unit:{Q}celsius{Q}}}<tool_call|>")
        assert _takes(vocab, make, f"<|tool_call>call:write_note{{text:{Q}hi{Q},"
                                   f"tags:[{Q}a{Q}]}}<tool_call|>")
        assert not _takes(vocab, make, f"<|tool_call>call:get_weather{{days:{Q}x{Q}}}<tool_call|>")
        assert not _takes(vocab, make, f"<|tool_call>call:get_weather{{unit:{Q}kelvin{Q}}}"
                                       "<tool_call|>")
        assert not _takes(vocab, make, "<|tool_call>call:nope{}<tool_call|>")


def test_gemma_s_grammar_writes_each_required_key_once_optional_ones_at_most_once():
    vocab, make = _gemma_constraint("gemma-4")
    city, unit = f"city:{Q}Paris{Q}", f"unit:{Q}celsius{Q}"

    def weather(body: str) -> str:
        return f"<|tool_call>call:get_weather{{{body}}}<tool_call|>"

    for body in (city, f"{city},days:3", f"{city},{unit}", f"{city},days:3,{unit}"):
        assert _takes(vocab, make, weather(body)), body
        (_, _, calls), _ = run(GEMMA, [weather(body)])  # and it reads as that call
        args = calls[0][1]
        assert calls[0][0] == "get_weather" and args["city"] == "Paris"
        jsonschema.validate(args, WEATHER.parameters)
    for body in ("", "days:3", unit, f"{city},{city}", f"{city},days:3,days:4",
                 f"days:3,{city}"):  # city is required; keys come once, in schema order
        assert not _takes(vocab, make, weather(body)), body
    note = f"<|tool_call>call:write_note{{tags:[{Q}a{Q}]}}<tool_call|>"  # text is required
    assert not _takes(vocab, make, note)


def test_gemma_s_grammar_types_nested_objects_and_list_items_by_their_schema():
    from backends.base import Tool
    from backends.grammar import Constraint, vocab_from_llama
    from backends.grammar.lark import Answer, grammar_text
    from tests.support.token_stream import load_vocab

    place = {"type": "object", "properties": {"country": {"type": "string"},
                                              "zip": {"type": "integer"}},
             "required": ["country"]}
    tool = Tool("trip", "A trip", {"type": "object", "properties": {
        "place": place, "stops": {"type": "array", "items": place}}, "required": ["place"]})
    model = load_vocab("gemma-4").model
    vocab = vocab_from_llama(model.vocab, model.n_vocab())
    grammar = grammar_text(Answer(tools=(tool,), choice="required"), chat(GEMMA).fmt,
                           "after", vocab)

    def make():
        return Constraint(vocab, grammar)

    ch = f"country:{Q}CH{Q}"
    good = f"<|tool_call>call:trip{{place:{{{ch},zip:8000}},stops:[{{{ch}}}]}}<tool_call|>"
    assert _takes(vocab, make, good)
    (_, _, calls), _ = run(GEMMA, [good])
    assert calls == (("trip", {"place": {"country": "CH", "zip": 8000},
                               "stops": [{"country": "CH"}]}),)
    for body in ("place:{zip:8000}", f"place:{{{ch}}},stops:[{{zip:1}}]",
                 f"place:{{{ch},other:1}}", "stops:[]"):
        assert not _takes(vocab, make, f"<|tool_call>call:trip{{{body}}}<tool_call|>"), body


def test_gemma_s_grammar_takes_parallel_calls_when_asked():
    vocab, make = _gemma_constraint("gemma-4", parallel=True)
    call = f"<|tool_call>call:get_weather{{city:{Q}Paris{Q}}}<tool_call|>"
    assert _takes(vocab, make, call + call)


def test_gemma_s_grammar_lets_it_think_in_its_channel_first():
    vocab, make = _gemma_constraint("gemma-4", start="maybe")
    call = f"<|tool_call>call:get_weather{{city:{Q}Paris{Q}}}<tool_call|>"
    assert _takes(vocab, make, "<|channel>thought\nParis, then.<channel|>" + call)
    assert _takes(vocab, make, call)


# -- Kimi K3 -------------------------------------------------------------------------------
K3 = "Kimi-K3"


def test_k3_s_frame_is_dropped_tools_offered_or_not():
    out = ("Thought.<|close|>think<|sep|><|open|>response<|sep|>Hello."
           "<|close|>response<|sep|><|close|>message<|sep|>")
    (content, reasoning, calls), _ = run(K3, by_char(out))
    assert (content, reasoning, calls) == ("Hello.", "Thought.", ())
    messages = (Message("user", "Hi"),)
    request = GenerationRequest(messages=messages)
    ct = chat(K3)
    parser = ct.parser(request, ct.render(messages, request))
    events = parser.feed(out) + parser.finish()
    assert summary(events)[:2] == ("Hello.", "Thought.")


def test_k3_takes_arguments_as_one_json_object_too():
    out = ('x<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="write_note" '
           'index="1"<|sep|><|open|>json type="object"<|sep|>{"text": "a&b"}'
           "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>")
    (_, _, calls), _ = run(K3, by_char(out))
    assert calls == (("write_note", {"text": "a&b"}),)


def test_k3_a_section_it_cannot_read_is_text_and_a_cut_one_is_dropped():
    bad = "x<|close|>think<|sep|><|open|>tools<|sep|>no call<|close|>tools<|sep|>"
    (content, _, calls), cut = run(K3, by_char(bad))
    assert calls == () and not cut and content == "<|open|>tools<|sep|>no call<|close|>tools<|sep|>"
    cut_off = ('x<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="get_time" '
               'index="1"<|sep|>')
    (content, _, calls), cut = run(K3, by_char(cut_off))
    assert calls == () and cut and content == ""


def test_k3_leaves_auto_free_for_its_parser_and_forces_calls_with_its_grammar():
    from backends.base import ToolChoice
    from backends.grammar import vocab_from_llama
    from backends.grammar.request import request_constraint
    from tests.support.token_stream import load_vocab

    model = load_vocab("qwen2").model
    vocab = vocab_from_llama(model.vocab, model.n_vocab())
    fmt = chat(K3).fmt
    messages = (Message("user", "Hi"),)
    auto = GenerationRequest(messages=messages, tools=TOOLS)
    assert request_constraint(auto, fmt, vocab) is None
    for choice in (ToolChoice("required"), ToolChoice("function", "get_weather")):
        forced = GenerationRequest(messages=messages, tools=TOOLS, tool_choice=choice)
        assert request_constraint(forced, fmt, vocab, "<|open|>think<|sep|>") is not None
    json_too = GenerationRequest(messages=messages, tools=TOOLS, json_mode=True)
    assert request_constraint(json_too, fmt, vocab) is not None


K3_MARKERS = ["<|open|>", "<|close|>", "<|sep|>"]


def k3_call(name: str, args: str, index: int = 1) -> str:
    return (f'<|open|>call tool="{name}" index="{index}"<|sep|><|open|>json type="object"'
            f"<|sep|>{args}<|close|>json<|sep|><|close|>call<|sep|>")


def k3_tools(*calls: str) -> str:
    return "<|open|>tools<|sep|>" + "".join(calls) + "<|close|>tools<|sep|>"


def _k3_constraint(special: bool, parallel: bool = False):
    """K3's forced-call grammar over a stand-in vocabulary (none of K3's ships): Qwen's,
    with K3's three markers as special tokens or (`special` False) as text; the prompt
    opened the thinking, as K3's template does."""
    from backends.grammar import Constraint
    from backends.grammar.lark import Answer, grammar_text
    from tests.unit.test_format_xml_families import qwen_vocab, special_vocab

    if special:
        vocab, _, encode = special_vocab(K3_MARKERS)
    else:
        vocab = qwen_vocab()

        def encode(text: str) -> list[int]:
            return vocab.tokenizer.tokenize_str(text)

    answer = Answer(tools=(WEATHER, TOOLS[2]), choice="required", parallel=parallel)
    grammar = grammar_text(answer, chat(K3).fmt, "inside", vocab)

    def takes(text: str | list[int]) -> bool:
        c, ids = Constraint(vocab, grammar), encode(text) if isinstance(text, str) else text
        return c.valid_prefix(ids) == len(ids) and c.matcher.consume_tokens(ids) \
            and c.matcher.is_accepting()

    return grammar, takes, encode


def test_k3_s_grammar_writes_a_call_after_its_thinking_and_frame_that_parses_back():
    paris = k3_call("get_weather", '{"city": "Zürich \\"x\\" {y}", "days": 2}')
    texts = [
        "Hm.<|close|>think<|sep|>" + k3_tools(paris),
        "Hm.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
        + k3_tools(paris) + "<|close|>message<|sep|>",
        "<|close|>think<|sep|>" + k3_tools(k3_call("write_note", '{"text": "a&b"}', 7)),
    ]
    for special in (True, False):
        grammar, takes, _ = _k3_constraint(special)
        assert ("<[" in grammar) == special  # the markers are their tokens where they are
        for text in texts:
            assert takes(text), (special, text)
            (_, reasoning, calls), _ = run(K3, by_char("x" + text))
            assert len(calls) == 1
            name, args = calls[0]
            assert name in ("get_weather", "write_note")
            jsonschema.validate(args, {t.name: t for t in TOOLS}[name].parameters)
        (_, _, calls), _ = run(K3, [texts[1]])
        assert calls == (("get_weather", {"city": 'Zürich "x" {y}', "days": 2}),)


def test_k3_s_grammar_refuses_a_missing_required_key_a_wrong_tool_and_text_markers():
    _, takes, encode = _k3_constraint(True)
    head = "Hm.<|close|>think<|sep|>"
    assert takes(head + k3_tools(k3_call("get_weather", '{"city": "Paris"}')))
    bad = [
        k3_tools(k3_call("get_weather", '{"days": 2}')),  # city is required
        k3_tools(k3_call("get_weather", '{"city": "Paris", "city": "Rome"}')),
        k3_tools(k3_call("get_weather", '{"city": 3}')),
        k3_tools(k3_call("get_time", "{}")),  # not offered
        k3_tools(k3_call("nope", "{}")),
        k3_tools(),  # no call
        k3_tools(k3_call("get_weather", '{"city": "Paris"}'),
                 k3_call("get_weather", '{"city": "Rome"}', 2)),  # not parallel
        '<|open|>response<|sep|>Sure.<|close|>response<|sep|>',  # no call at all
        '<|open|>response<|sep|>On it.<|close|>response<|sep|>'  # text before the call
        + k3_tools(k3_call("get_weather", '{"city": "Paris"}')),
    ]
    for text in bad:
        assert not takes(head + text), text
    # the markers written as text are not the markers
    from tests.unit.test_format_xml_families import qwen_vocab

    call = k3_tools(k3_call("get_weather", '{"city": "Paris"}'))
    assert not takes(encode(head) + qwen_vocab().tokenizer.tokenize_str(call))


def test_k3_s_grammar_takes_parallel_calls_when_asked():
    _, takes, _ = _k3_constraint(True, parallel=True)
    calls = k3_tools(k3_call("get_weather", '{"city": "Paris"}'),
                     k3_call("write_note", '{"text": "hi", "tags": ["a"]}', 2))
    assert takes("<|close|>think<|sep|>" + calls)
    (_, _, parsed), _ = run(K3, by_char("x<|close|>think<|sep|>" + calls))
    assert parsed == (("get_weather", {"city": "Paris"}),
                      ("write_note", {"text": "hi", "tags": ["a"]}))


def test_k3_deep_nesting_is_text_not_a_crash():
    deep = "[" * 50_000 + "]" * 50_000
    out = ('x<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="write_note" '
           f'index="1"<|sep|><|open|>argument key="tags" type="array"<|sep|>{deep}'
           "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>")
    (content, _, calls), _ = run(K3, [out])
    assert calls == () and content.startswith("<|open|>tools<|sep|>")


def test_the_calls_before_a_cut_one_are_kept():
    """A block parser never reports the call the output cut off, so the job must keep the
    last call it did report (it drops a streamed call cut short, the tagged parsers')."""
    from tests.support.token_stream import replay

    request = GenerationRequest(messages=(Message("user", "Hi"),), tools=TOOLS)
    out = f"<|tool_call>call:get_time{{}}<tool_call|><|tool_call>call:get_weather{{city:{Q}Par"
    done = replay(chat(GEMMA), "gemma-4", out, request=request, reason="length").done
    assert [c.name for c in done.tool_calls] == ["get_time"]


def test_kimi_calls_that_open_inside_the_thinking_end_it():
    out = (f"<think>Call it.{SECTION}<|tool_call_begin|>functions.get_time:0"
           f"<|tool_call_argument_begin|>{{}}<|tool_call_end|>{SECTION_END}")
    (content, reasoning, calls), cut = run(K2, by_char(out))
    assert (content, reasoning, calls, cut) == ("", "Call it.", (("get_time", {}),), False)
