"""The grammars of backends.grammar on a real vocabulary (Qwen2.5's, read from its GGUF with
vocab_only: a second, no weights): the exact call texts of every tool format, forced and
lazy tool choice, thinking before a schema, and the token-level API the engines use."""

from __future__ import annotations

import re

import numpy as np
import pytest

from backends.base import GenerationRequest, Message, Tool, ToolChoice
from backends.chat_format.base import ChatFormat, ThinkingMarkers
from backends.errors import InvalidRequestError
from backends.grammar import Constraint, request_constraint, vocab_from_llama, vocab_from_pieces
from backends.grammar.lark import Answer, grammar_text

WEATHER = Tool("get_weather", "Weather forecast", {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "number"},
                   "where": {"type": "object", "properties": {"country": {"type": "string"}},
                             "required": ["country"]}},
    "required": ["city", "unit"]})
TIME = Tool("get_time", "The time now", {"type": "object", "properties": {}})
TOOLS = (WEATHER, TIME)
ARGS = '{"city": "Zürich", "unit": "celsius", "days": 3, "where": {"country": "CH"}}'
CALL = '{"name": "get_weather", "arguments": ' + ARGS + "}"
EXACT = {
    "hermes": f"<tool_call>\n{CALL}\n</tool_call>",
    "llama3": '{"name": "get_weather", "parameters": ' + ARGS + "}",
    "mistral": f'[TOOL_CALLS][{CALL}, {{"name": "get_time", "arguments": {{}}}}]',
    "phi4": f"<|tool_call|>[{CALL}]<|/tool_call|>",
    "generic": f"[TOOL_REQUEST]{CALL}[END_TOOL_REQUEST]",
}
THINK = ThinkingMarkers("<think>", "</think>")


@pytest.fixture(scope="module")
def vocab(qwen):
    import llama_cpp
    from llama_cpp._internals import LlamaModel

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = LlamaModel(path_model=str(qwen.path), params=params, verbose=False)
    yield vocab_from_llama(model.vocab, model.n_vocab())
    model.close()


def constraint(vocab, answer: Answer, fmt: ChatFormat, start="after") -> Constraint:
    return Constraint(vocab, grammar_text(answer, fmt, start, vocab))


def tokens(vocab, text: str) -> list[int]:
    return vocab.tokenizer.tokenize_str(text, parse_special=True)


def takes_whole(c: Constraint, ids: list[int]) -> bool:
    """All of `ids` are allowed, and the grammar may end after them."""
    return c.valid_prefix(ids) == len(ids) and c.matcher.consume_tokens(ids) \
        and c.matcher.is_accepting()


@pytest.mark.parametrize("fmt", sorted(EXACT))
def test_each_format_takes_its_exact_call_text_and_nothing_looser(vocab, fmt):
    required = Answer(tools=TOOLS, choice="required")
    assert takes_whole(constraint(vocab, required, ChatFormat(tools=fmt)),
                       tokens(vocab, EXACT[fmt]))
    compact = EXACT[fmt].replace('"city": "Z', '"city":"Z')  # another spelling of the JSON
    assert not takes_whole(constraint(vocab, required, ChatFormat(tools=fmt)),
                           tokens(vocab, compact))
    off_schema = EXACT[fmt].replace('"celsius"', '"kelvin"')
    assert not takes_whole(constraint(vocab, required, ChatFormat(tools=fmt)),
                           tokens(vocab, off_schema))


def test_hermes_markers_are_qwens_single_special_tokens(vocab):
    c = constraint(vocab, Answer(tools=TOOLS, choice="required"), ChatFormat(tools="hermes"))
    first = c.allowed()
    assert np.flatnonzero(first).tolist() == tokens(vocab, "<tool_call>") == [151657]


def test_named_choice_allows_only_that_tool_and_one_call(vocab):
    request = GenerationRequest(messages=(Message("user", "hi"),), tools=TOOLS,
                                tool_choice=ToolChoice("function", "get_time"))
    fmt = ChatFormat(tools="hermes")
    c = request_constraint(request, fmt, vocab)
    assert not takes_whole(c, tokens(vocab, EXACT["hermes"]))
    time_call = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    c = request_constraint(request, fmt, vocab)
    assert takes_whole(c, tokens(vocab, time_call))
    assert c.done  # exactly one call: only the end may follow
    twice = tokens(vocab, time_call + "\n" + time_call)
    assert request_constraint(request, fmt, vocab).valid_prefix(twice) == len(
        tokens(vocab, time_call))


def test_parallel_calls_follow_each_other_only_when_asked_for(vocab):
    two = EXACT["hermes"] + "\n" + EXACT["hermes"]
    fmt = ChatFormat(tools="hermes")
    assert takes_whole(constraint(vocab, Answer(tools=TOOLS, choice="required"), fmt),
                       tokens(vocab, two))
    one = constraint(vocab, Answer(tools=TOOLS, choice="required", parallel=False), fmt)
    assert one.valid_prefix(tokens(vocab, two)) == len(tokens(vocab, EXACT["hermes"]))


@pytest.mark.parametrize("fmt", ["hermes", "generic", "mistral"])
def test_auto_is_free_until_the_trigger_then_constrained(vocab, fmt):
    auto = Answer(tools=TOOLS, choice="auto")
    free = constraint(vocab, auto, ChatFormat(tools=fmt))
    allowed = free.allowed()
    assert allowed.sum() > 150_000  # any text, and the end
    assert all(allowed[t] for t in vocab.eog if t < len(allowed))
    assert takes_whole(free, tokens(vocab, "It is sunny, I think. No tool needed."))
    trigger = {"hermes": "<tool_call>", "generic": "[TOOL_REQUEST]",
               "mistral": "[TOOL_CALLS]"}[fmt]
    c = constraint(vocab, auto, ChatFormat(tools=fmt))
    assert c.valid_prefix(tokens(vocab, f"Let me look. {trigger}")) == len(
        tokens(vocab, f"Let me look. {trigger}"))
    c.matcher.consume_tokens(tokens(vocab, f"Let me look. {trigger}"))
    assert c.valid_prefix(tokens(vocab, " sorry, no")) == 0  # the call is constrained now
    assert takes_whole(constraint(vocab, auto, ChatFormat(tools=fmt)),
                       tokens(vocab, "Let me look. " + EXACT[fmt]))


def test_json_schema_applies_after_the_thinking_not_to_it(vocab):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = ChatFormat(thinking=THINK)
    answer = Answer(json=True, schema=schema)
    thought = 'The user wants {"n": "not a number"} maybe.'
    assert takes_whole(constraint(vocab, answer, fmt, "maybe"),
                       tokens(vocab, f'<think>{thought}</think>\n\n{{"n": 7}}'))
    assert takes_whole(constraint(vocab, answer, fmt, "maybe"), tokens(vocab, '{"n": 7}'))
    assert takes_whole(constraint(vocab, answer, fmt, "inside"),
                       tokens(vocab, f'{thought}</think>\n{{"n": 7}}'))
    bad = constraint(vocab, answer, fmt, "inside")
    prefix = tokens(vocab, f"{thought}</think>\n")
    assert bad.valid_prefix(prefix) == len(prefix)
    bad.matcher.consume_tokens(prefix)
    assert bad.valid_prefix(tokens(vocab, '{"n": "x"}')) < len(tokens(vocab, '{"n": "x"}'))


def test_required_call_after_thinking(vocab):
    fmt = ChatFormat(tools="hermes", thinking=THINK)
    c = constraint(vocab, Answer(tools=TOOLS, choice="required"), fmt, "maybe")
    assert takes_whole(c, tokens(vocab, "<think>\nParis? Use the tool.\n</think>\n\n"
                                 + EXACT["hermes"]))


def test_thinking_start_is_read_from_the_prompt(vocab):
    request = GenerationRequest(messages=(Message("user", "hi"),), json_mode=True)
    fmt = ChatFormat(thinking=THINK)
    opened = request_constraint(request, fmt, vocab, "<|im_start|>assistant\n<think>\n")
    assert takes_whole(opened, tokens(vocab, 'hm</think>{"a": 1}'))
    closed = request_constraint(request, fmt, vocab, "assistant\n<think>\n\n</think>\n\n")
    assert closed.valid_prefix(tokens(vocab, "<think>")) == 0


def test_harmony_call_uses_its_special_tokens(vocab):
    """gpt-oss's markers are special tokens: a vocabulary with them (Qwen's pieces plus the
    harmony tokens, as an MLX or Hugging Face tokenizer gives them)."""
    n = vocab.n_vocab
    pieces = [vocab.tokenizer.decode_bytes([i]) if not vocab.tokenizer.is_special_token(i)
              else b"" for i in range(n)]
    names = ["<|channel|>", "<|message|>", "<|constrain|>", "<|call|>", "<|end|>",
             "<|start|>", "<|return|>"]
    special = {n + i: name for i, name in enumerate(names)}
    eog = [n + names.index("<|return|>"), n + names.index("<|call|>")]
    harmony = vocab_from_pieces(pieces + [b""] * len(names), special, eog,
                                lambda text: vocab.tokenizer.tokenize_str(text), n + len(names))
    fmt = ChatFormat(tools="harmony", harmony=True)
    text = ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
            f"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{ARGS}"
            "<|call|>")

    def encode(text: str) -> list[int]:  # special-token texts as those tokens
        parts = re.split("(" + "|".join(re.escape(x) for x in names) + ")", text)
        return [i for part in parts if part for i in (
            [n + names.index(part)] if part in names else tokens(vocab, part))]

    c = constraint(harmony, Answer(tools=TOOLS, choice="required"), fmt)
    assert "<[151938]>" in c.grammar  # <|constrain|> is named by its id
    ids = encode(text)
    assert c.valid_prefix(ids) == len(ids) and c.matcher.consume_tokens(ids[:-1])
    assert np.flatnonzero(c.allowed()).tolist() == sorted(eog)  # <|call|> (or <|return|>)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    final = encode('<|channel|>final<|message|>{"n": 1}')
    assert takes_whole(constraint(harmony, Answer(json=True, schema=schema), fmt), final)
    assert not takes_whole(constraint(harmony, Answer(json=True, schema=schema), fmt),
                           encode('<|channel|>final<|message|>{"n": 1.5}'))


def test_mask_and_speculative_helpers(vocab):
    c = constraint(vocab, Answer(json=True, schema={"type": "object", "properties": {
        "ok": {"type": "boolean"}}, "required": ["ok"]}), ChatFormat())
    row = np.zeros(vocab.n_vocab, dtype=np.float32)
    c.mask(row)
    assert np.isfinite(row).sum() == c.allowed().sum() > 0
    assert np.isfinite(row[tokens(vocab, "{")[0]]) and not np.isfinite(row[tokens(vocab, "x")[0]])
    ids = tokens(vocab, '{"ok": true}')
    assert c.valid_prefix(ids + tokens(vocab, " junk")) == len(ids)
    rows = c.allowed_along(ids[:3])
    assert len(rows) == 4 and rows[0][ids[0]] and rows[3][ids[3]] and not rows[3][ids[0]]
    assert c.allowed()[ids[0]]  # rolled back to where it was
    assert c.accept(ids[0]) and not c.accept(tokens(vocab, "x")[0]) and c.error
    assert np.flatnonzero(c.allowed()).tolist() == sorted(vocab.eog)  # errors may only end


def test_free_requests_get_no_constraint_and_bad_schemas_a_400(vocab):
    hi = (Message("user", "hi"),)
    assert request_constraint(GenerationRequest(messages=hi), ChatFormat(), vocab) is None
    none = GenerationRequest(messages=hi, tools=TOOLS, tool_choice=ToolChoice("none"))
    assert request_constraint(none, ChatFormat(tools="hermes"), vocab) is None
    bad = GenerationRequest(messages=hi, json_schema={"type": "object", "properties": {
        "a": {"type": "string", "pattern": "(?<=x)a"}}})
    with pytest.raises(InvalidRequestError) as e:
        request_constraint(bad, ChatFormat(), vocab)
    assert e.value.param == "response_format"


def test_listed_properties_are_the_only_ones_unless_the_schema_opens_it(vocab):
    fmt = ChatFormat()
    listed = {"type": "object", "properties": {"a": {"type": "integer"}}}
    extra = tokens(vocab, '{"a": 1, "b": 2}')
    assert not takes_whole(constraint(vocab, Answer(json=True, schema=listed), fmt), extra)
    opened = {**listed, "additionalProperties": True}
    assert takes_whole(constraint(vocab, Answer(json=True, schema=opened), fmt), extra)
