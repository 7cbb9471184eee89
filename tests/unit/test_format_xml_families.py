"""The families whose calls carry their arguments as tags (Qwen3-Coder, Seed-OSS, GLM,
MiniMax-M2, DeepSeek DSML), beyond the conformance cases: the grammar and the parser agree
on a call with every kind of value, a malformed or cut block comes back as text or as no
call, hostile sizes stay fast, and thinking where the switch opens it."""

from __future__ import annotations

import time
from functools import cache

import pytest

from backends.base import GenerationRequest, Message, Thinking
from tests.support.families import chat
from tests.support.family_cases import TOOLS
from tests.unit.test_family_conformance import summary

TEXT = 'Zürich "q" {b} </parameter>'
CALLS = {  # template -> get_weather(city=TEXT, days=3, unit="celsius") as its model writes it
    "Qwen3-Coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\n" + TEXT
                   + "\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=unit>\n"
                   "celsius\n</parameter>\n</function>\n</tool_call>",
    "ByteDance-Seed-OSS": "<seed:tool_call>\n<function=get_weather>\n<parameter=city>" + TEXT
                          + "</parameter>\n<parameter=days>3</parameter>\n<parameter=unit>"
                          "celsius</parameter>\n</function>\n</seed:tool_call>",
    "GLM-4.6": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>" + TEXT
               + "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
               "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>",
    "GLM-4.7-Flash": "<tool_call>get_weather<arg_key>city</arg_key><arg_value>" + TEXT
                     + "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value>"
                     "<arg_key>unit</arg_key><arg_value>celsius</arg_value></tool_call>",
    "MiniMax-M2": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">'
                  + TEXT + '</parameter>\n<parameter name="days">3</parameter>\n'
                  '<parameter name="unit">celsius</parameter>\n</invoke>\n</minimax:tool_call>',
    "deepseek-ai-DeepSeek-V4": '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                               '<｜DSML｜parameter name="city" string="true">' + TEXT
                               + '</｜DSML｜parameter>\n<｜DSML｜parameter name="days" '
                               'string="false">3</｜DSML｜parameter>\n<｜DSML｜parameter '
                               'name="unit" string="true">celsius</｜DSML｜parameter>\n'
                               "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "MiniMax-M3": "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"get_weather\">"
                  "]<]minimax[>[<city>" + TEXT + "]<]minimax[>[</city>]<]minimax[>[<days>3"
                  "]<]minimax[>[</days>]<]minimax[>[<unit>celsius]<]minimax[>[</unit>"
                  "]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
}
EXPECTED = ("get_weather", {"city": TEXT, "days": 3, "unit": "celsius"})
ASK = (Message("user", "Weather in Paris?"),)


def read(template: str, pieces: list[str], thinking: bool | None = None):
    request = GenerationRequest(messages=ASK, tools=TOOLS, thinking=Thinking(enabled=thinking))
    ct = chat(template)
    parser = ct.parser(request, ct.render(ASK, request))
    events = [e for piece in pieces for e in parser.feed(piece)] + parser.finish()
    return summary(events, parser.cut_call), parser.cut_call


@cache
def qwen_vocab():
    from backends.grammar import vocab_from_llama
    from tests.support.token_stream import load_vocab

    model = load_vocab("qwen2").model
    return vocab_from_llama(model.vocab, model.n_vocab())


def grammar_constraint(template: str, parallel: bool = False, choice: str = "required"):
    from backends.grammar import Constraint
    from backends.grammar.lark import Answer, grammar_text

    vocab = qwen_vocab()
    answer = Answer(tools=TOOLS, choice=choice, parallel=parallel)  # type: ignore[arg-type]
    return vocab, Constraint(vocab, grammar_text(answer, chat(template).fmt, "after", vocab))


def takes(template: str, text: str, **kwargs) -> bool:
    vocab, constraint = grammar_constraint(template, **kwargs)
    ids = vocab.tokenizer.tokenize_str(text, parse_special=True)
    return constraint.valid_prefix(ids) == len(ids) \
        and constraint.matcher.consume_tokens(ids) and constraint.matcher.is_accepting()


@pytest.mark.parametrize("template", CALLS)
def test_the_grammar_writes_what_the_parser_reads_back(template):
    text = CALLS[template].replace(" </parameter>", "")  # the grammar's text ends there
    expected = ("get_weather", {**EXPECTED[1], "city": 'Zürich "q" {b}'})
    assert takes(template, text)
    (_, _, calls), _ = read(template, [text], thinking=False)
    assert calls == (expected,)


@pytest.mark.parametrize("template", CALLS)
def test_the_grammar_refuses_a_wrong_tool_a_mistyped_value_and_text_after(template):
    text = CALLS[template].replace(" </parameter>", "")
    assert not takes(template, text.replace("get_weather", "get_wether"))
    mistyped = text.replace(">3<", ">three<").replace("\n3\n", "\nthree\n")
    assert mistyped != text or ">3]" in text
    assert not takes(template, mistyped.replace(">3]", ">three]"))
    assert not takes(template, text + "\nmore")


@pytest.mark.parametrize("template", CALLS)
def test_the_grammar_takes_parallel_calls_and_text_before_them_in_auto(template):
    call = CALLS[template].replace(" </parameter>", "")
    (_, _, one), _ = read(template, [call], thinking=False)
    assert one
    assert takes(template, "Sure. " + call, choice="auto", parallel=True)
    if chat(template).fmt.tools in ("qwen3_coder", "glm"):  # a block per call, newline or not
        assert takes(template, call + call, parallel=True)
        assert takes(template, call + "\n" + call, parallel=True)
        (_, _, two), _ = read(template, [call + call], thinking=False)
        assert two == one * 2


@pytest.mark.parametrize("template", CALLS)
@pytest.mark.parametrize("size", [None, 1, 4])
def test_a_value_may_hold_the_closing_tags(template, size):
    text = CALLS[template]
    pieces = [text] if size is None else [text[i:i + size] for i in range(0, len(text), size)]
    (content, _, calls), cut = read(template, pieces, thinking=False)
    assert calls == (EXPECTED,) and content == "" and not cut


@pytest.mark.parametrize("template", CALLS)
def test_a_cut_block_is_no_call_and_the_text_before_it_stays(template):
    text = CALLS[template]
    for end in (len(text) // 3, len(text) - 3):
        (content, _, calls), cut = read(template, ["Before. ", text[:end]], thinking=False)
        assert calls == () and cut and content == "Before."


@pytest.mark.parametrize("template", CALLS)
@pytest.mark.parametrize("damage", ["junk before a parameter", "no name"])
def test_a_malformed_block_comes_back_as_text(template, damage):
    text = CALLS[template]
    if damage == "junk before a parameter":
        tags = ("<parameter", "<arg_key>", "<｜DSML｜parameter", "]<]minimax[>[<city>")
        at = min(i for tag in tags if (i := text.find(tag)) >= 0)
        broken = text[:at] + "<junk> " + text[at:]
    else:
        broken = text.replace("get_weather", "", 1).replace('name=""', "name=")
    (content, _, calls), cut = read(template, ["Before. ", broken, " After."], thinking=False)
    assert calls == () and not cut
    assert content.replace(" ", "") == f"Before.{broken}After.".replace(" ", "")


@pytest.mark.parametrize("template", CALLS)
def test_huge_and_many_tag_values_stay_fast(template):
    """A value of 200k characters, and one of many closers and openers, fed in small
    pieces: the block is read once it ends, in well under a second each."""
    tags = "</parameter>x<parameter=a </arg_value>x<arg_key>x</tool_call>x<tool_call>x"
    for filler in ("x" * 200_000, tags * 2_000):
        text = CALLS[template].replace(TEXT, filler)
        pieces = [text[i:i + 64] for i in range(0, len(text), 64)]
        start = time.monotonic()
        (_, _, calls), _ = read(template, pieces, thinking=False)
        assert time.monotonic() - start < 5
        assert calls == (("get_weather", {**EXPECTED[1], "city": filler}),)


@pytest.mark.parametrize(("template", "shape", "think"), [
    ("deepseek-ai-DeepSeek-V3.2", "deepseek-ai-DeepSeek-V4", "Paris it is.</think>"),
    ("deepseek-ai-DeepSeek-V4", "deepseek-ai-DeepSeek-V4", "Paris it is.</think>"),
    ("ByteDance-Seed-OSS", "ByteDance-Seed-OSS",
     "<seed:think>Paris <seed:cot_budget_reflect>20 used</seed:cot_budget_reflect> it is."
     "</seed:think>"),
    ("Qwen3.5-4B", "Qwen3-Coder", "Paris it is.\n</think>\n\n"),
    ("MiniMax-M2", "MiniMax-M2", "Paris it is.\n</think>\n\n"),
    ("GLM-4.7-Flash", "GLM-4.7-Flash", "Paris it is.</think>"),
    ("GLM-4.6", "GLM-4.6", "\n<think>Paris it is.</think>\n"),
])
def test_thinking_comes_before_the_calls_when_the_switch_is_on(template, shape, think):
    call = CALLS[shape]
    if template == "deepseek-ai-DeepSeek-V3.2":
        call = call.replace("tool_calls>", "function_calls>")
    (content, reasoning, calls), _ = read(template, [think + call], thinking=True)
    assert calls == (EXPECTED,) and content == ""
    assert reasoning.startswith("Paris") and reasoning.endswith("it is.")


@pytest.mark.parametrize("template", ["Qwen3.5-4B", "GLM-4.7-Flash", "deepseek-ai-DeepSeek-V4",
                                      "MiniMax-M2", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                                      "ByteDance-Seed-OSS"])
def test_with_thinking_off_the_output_starts_in_the_answer(template):
    """Seed-OSS has no switch: a thinking budget of 0 closes its thinking in the prompt."""
    request = GenerationRequest(messages=ASK, tools=TOOLS, thinking=Thinking(enabled=False))
    ct = chat(template)
    prompt = ct.render(ASK, request)
    assert ct.fmt.thinking is not None and prompt.rstrip().endswith(ct.fmt.thinking.close)
    (content, reasoning, _), _ = read(template, ["Hello."], thinking=False)
    assert (content, reasoning) == ("Hello.", "")


def test_a_tool_outside_the_offered_ones_is_typed_as_text():
    (_, _, calls), _ = read("MiniMax-M2", ['</think><minimax:tool_call>\n<invoke name="other">'
                                           '\n<parameter name="n">3</parameter>\n</invoke>\n'
                                           "</minimax:tool_call>"])
    assert calls == (("other", {"n": "3"}),)


def test_dsml_string_false_is_json_and_bad_json_stays_text():
    text = ('</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name="write_note">\n'
            '<｜DSML｜parameter name="text" string="false">{"a": [1]}</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="tags" string="false">[oops</｜DSML｜parameter>\n'
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
    (_, _, calls), _ = read("deepseek-ai-DeepSeek-V4", [text])
    assert calls == (("write_note", {"text": {"a": [1]}, "tags": "[oops"}),)


@pytest.mark.parametrize("text", ["#include <functional>\nint main();",
                                  "Use <function=NAME> tags, then </function>.",
                                  "<function=f>\n<parameter=a>\n1\n</parameter>\n"])
def test_qwen3_coder_reads_a_bare_function_only_in_its_call_shape(text):
    (content, _, calls), cut = read("Qwen3-Coder", [text])
    if text.startswith("<function=f>"):  # a call the output cut off
        assert (content, calls, cut) == ("", (), True)
    else:  # (the block parser drops the space before an opener it then shows as text)
        assert (content.replace(" ", ""), calls, cut) == (text.replace(" ", ""), (), False)


def test_seed_oss_can_be_told_not_to_think():
    from app.runtime.thinking import support_of

    assert support_of(chat("ByteDance-Seed-OSS").fmt).settings == ("on", "off")


def special_vocab(names: list[str]):
    """Qwen's pieces plus `names` as special tokens (as a Hugging Face tokenizer gives
    them), and an encoder that reads their texts as those tokens."""
    import re

    from backends.grammar import vocab_from_pieces

    qwen = qwen_vocab()
    n = qwen.n_vocab
    pieces = [qwen.tokenizer.decode_bytes([i]) if not qwen.tokenizer.is_special_token(i)
              else b"" for i in range(n)]
    ids = {name: n + i for i, name in enumerate(names)}
    vocab = vocab_from_pieces(pieces + [b""] * len(names), {i: t for t, i in ids.items()},
                              qwen.eog, lambda text: qwen.tokenizer.tokenize_str(text),
                              n + len(names))

    def encode(text: str) -> list[int]:
        parts = re.split("(" + "|".join(re.escape(x) for x in ids) + ")", text)
        return [i for part in parts if part for i in (
            [ids[part]] if part in ids else qwen.tokenizer.tokenize_str(part))]

    return vocab, ids, encode


@pytest.mark.parametrize(("template", "names"), [
    ("GLM-4.7-Flash", ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]),
    ("deepseek-ai-DeepSeek-V4", ["｜DSML｜"]),
    ("MiniMax-M3", ["]<]minimax[>["]),
])
def test_tags_that_are_special_tokens_are_written_as_those_tokens(template, names):
    """GLM's tags, DeepSeek's `｜DSML｜` and MiniMax-M3's namespace are special tokens: a
    forced call writes them as those tokens, and a string value ends at its closer's."""
    from backends.grammar import Constraint
    from backends.grammar.lark import Answer, grammar_text

    vocab, ids, encode = special_vocab(names)
    grammar = grammar_text(Answer(tools=TOOLS, choice="required"), chat(template).fmt,
                           "after", vocab)
    assert f"<[{ids[names[-1]]}]>" in grammar  # named by its id
    for text in (CALLS[template], CALLS[template].replace(" </parameter>", " a</b>")):
        c = Constraint(vocab, grammar)
        tokens = encode(text)
        assert c.valid_prefix(tokens) == len(tokens) and c.matcher.consume_tokens(tokens)
        assert c.matcher.is_accepting()


NS = "]<]minimax[>["


def m3(inner: str) -> str:
    return f'{NS}<tool_call>\n{NS}<invoke name="write_note">{inner}{NS}</invoke>\n{NS}</tool_call>'


@pytest.mark.parametrize(("inner", "arguments"), [
    (f"{NS}<text>a{NS}</text>{NS}<tags>{NS}</tags>", {"text": "a", "tags": []}),
    (f"{NS}<text>{NS}<k>{NS}<item>1{NS}</item>{NS}</k>{NS}</text>", {"text": {"k": ["1"]}}),
    (f"{NS}<text>a{NS}</text>{NS}<tags>{NS}<item>x{NS}</item>{NS}</tags>",
     {"text": "a", "tags": ["x"]}),
])
def test_minimax_m3_nests_objects_and_arrays_as_elements(inner, arguments):
    (_, _, calls), _ = read("MiniMax-M3", [m3(inner)])
    assert calls == (("write_note", arguments),)


@pytest.mark.parametrize("inner", [
    f"{NS}<text>a",  # not closed
    f"{NS}<text>a{NS}</tags>",  # closed by another
    f"{NS}<text>a{NS}<b>c{NS}</b>{NS}</text>",  # text before a nested element
    f"{NS}<text>" + f"{NS}<a>" * 5000 + "x" + f"{NS}</a>" * 5000 + f"{NS}</text>",  # deep
])
def test_minimax_m3_malformed_or_too_deep_comes_back_as_text(inner):
    (content, _, calls), cut = read("MiniMax-M3", [m3(inner)])
    assert calls == () and not cut and "write_note" in content


def test_minimax_m3_s_grammar_nests_an_array_as_items():
    text = m3(f"{NS}<text>hi {NS}</text>{NS}<tags>{NS}<item>a{NS}</item>{NS}<item>b{NS}</item>"
              f"{NS}</tags>")
    assert takes("MiniMax-M3", text)
    assert not takes("MiniMax-M3", text.replace("<item>a", "<thing>a").replace(
        "</item>", "</thing>", 1))
    (_, _, calls), _ = read("MiniMax-M3", [text])
    assert calls == (("write_note", {"text": "hi ", "tags": ["a", "b"]}),)

