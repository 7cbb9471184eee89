"""Every model family (backends/chat_format/families/) passes the same checks, on its real
chat templates (tests/support/family_cases.py lists the cases):

- its templates detect as that family, and as no other;
- the template renders a conversation with the tools, a call, its result and thinking;
- the output parses into the case's content, reasoning and calls whole, in pieces of 1, 3
  and 7 characters, and (where a vocabulary ships) token by token;
- cut anywhere, the output never gives a half call, nor a marker in the text or a call;
- the family's grammar for `tool_choice: required` takes its exact call text.
"""

from __future__ import annotations

import json

import pytest

from backends.base import (
    GenerationRequest,
    Message,
    OutputEvent,
    ReasoningEvent,
    TokenEvent,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
)
from backends.chat_format.families import BY_NAME, FAMILIES, family_of, matching_families
from tests.support.families import chat
from tests.support.family_cases import CASES, TOOLS, FamilyCase
from tests.support.token_stream import replay

TEMPLATE_CASES = [(case, name) for case in CASES for name in case.templates]


def parsed(case: FamilyCase, template: str, pieces: list[str]):
    """(content, reasoning, calls) of the output fed in `pieces`."""
    messages = (Message("user", "Weather in Paris?"),)
    request = GenerationRequest(messages=messages, tools=TOOLS)
    ct = chat(template)
    prompt = ct.render(messages, request)
    parser = ct.parser(request, prompt)
    events: list[OutputEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    return summary(events, parser.cut_call), parser.cut_call


def summary(events, cut_call: bool = False):
    """What a job makes of the events: a call the output cut off is dropped (BaseJob)."""
    content = "".join(e.text for e in events if isinstance(e, TokenEvent))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningEvent))
    calls: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, ToolCallEvent):
            entry = calls.setdefault(e.index, ["", ""])
            entry[0] += e.name or ""
            entry[1] += e.arguments or ""
    whole = list(calls.values())[:-1] if cut_call else list(calls.values())
    return (content.strip(), reasoning.strip(),
            tuple((name, json.loads(args or "{}")) for name, args in whole))


def cut(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def test_every_family_has_a_case():
    covered = {case.family for case in CASES}
    assert {f.name for f in FAMILIES} | {"generic"} <= covered


def test_family_names_are_unique():
    assert len(BY_NAME) == len(FAMILIES) + 3  # and generic, unknown, none


@pytest.mark.parametrize(("case", "template"), TEMPLATE_CASES, ids=str)
def test_template_detects_as_its_family_only(case, template):
    source = chat(template).source
    assert family_of(source).name == case.family
    assert [f.name for f in matching_families(source)] in ([case.family], [])


@pytest.mark.parametrize(("case", "template"), TEMPLATE_CASES, ids=str)
def test_template_renders_tools_a_call_its_result_and_thinking(case, template):
    messages = (Message("system", "Be brief."), Message("user", "Weather in Paris?"),
                Message("assistant", "", reasoning="The user wants Paris.",
                        tool_calls=(ToolCall("call_p", "get_weather", '{"city": "Paris"}'),)),
                Message("tool", "18 degrees and sunny", tool_call_id="call_p"))
    request = GenerationRequest(messages=messages, tools=TOOLS)
    prompt = chat(template, "<s>", "</s>").render(messages, request)
    assert "get_weather" in prompt and "write_note" in prompt  # the tools are offered
    assert "18 degrees and sunny" in prompt
    assert "Paris" in prompt


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("size", [None, 1, 3, 7])
def test_output_parses_the_same_whole_and_in_pieces(case, size):
    pieces = [case.output] if size is None else cut(case.output, size)
    (content, reasoning, calls), cut_call = parsed(case, case.templates[0], pieces)
    assert calls == case.calls
    assert content == case.content
    assert reasoning == case.reasoning
    assert not cut_call


@pytest.mark.parametrize("case", [c for c in CASES if c.vocab], ids=str)
def test_output_parses_the_same_token_by_token(case):
    request = GenerationRequest(messages=(Message("user", "Weather in Paris?"),), tools=TOOLS)
    done = replay(chat(case.templates[0]), case.vocab, case.output, request=request).done
    calls = tuple((c.name, json.loads(c.arguments)) for c in done.tool_calls)
    assert calls == case.calls
    assert done.text.strip() == case.content
    assert (done.reasoning or "").strip() == case.reasoning


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_cut_output_never_gives_half_a_call_or_a_marker(case):
    for end in range(len(case.output) + 1):
        (content, reasoning, calls), cut_call = parsed(case, case.templates[0],
                                                       cut(case.output[:end], 5))
        for call in calls:
            assert call in case.calls, (end, call)
        for text in (content, *(name for name, _ in calls)):
            assert not any(m in text for m in case.markers), (end, text)


def test_a_template_that_renders_tools_in_no_known_way_refuses_a_request_with_tools():
    template = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                "{% if tools %}Tools: {{ tools | tojson }}{% endif %}")
    ct = chat_source(template)
    assert ct.fmt.tools == "unknown"
    messages = (Message("user", "Hi"),)
    assert "user: Hi" in ct.render(messages, GenerationRequest(messages=messages))
    with pytest.raises(Exception, match="format Ember does not know") as info:
        ct.render(messages, GenerationRequest(messages=messages, tools=TOOLS))
    assert "some-model" in str(info.value)
    none = GenerationRequest(messages=messages, tools=TOOLS, tool_choice=ToolChoice("none"))
    assert "user: Hi" in ct.render(messages, none)


def chat_source(source: str):
    from backends.chat_format.render import ChatTemplate

    return ChatTemplate(source, model_ref="some-model")


@pytest.mark.parametrize("case", [c for c in CASES if c.forced], ids=str)
def test_the_forced_call_grammar_takes_the_family_s_exact_call_text(case):
    from backends.grammar import Constraint, vocab_from_llama
    from backends.grammar.lark import Answer, grammar_text
    from tests.support.family_cases import WEATHER
    from tests.support.token_stream import load_vocab

    model = load_vocab(case.vocab or "qwen2").model
    vocab = vocab_from_llama(model.vocab, model.n_vocab())
    fmt = chat(case.templates[0]).fmt
    answer = Answer(tools=(WEATHER,), choice="required", parallel=False)
    constraint = Constraint(vocab, grammar_text(answer, fmt, "after", vocab))
    ids = vocab.tokenizer.tokenize_str(case.forced, parse_special=True)
    assert constraint.valid_prefix(ids) == len(ids)
    assert constraint.matcher.consume_tokens(ids) and constraint.matcher.is_accepting()
    other = Constraint(vocab, grammar_text(answer, fmt, "after", vocab))
    wrong = vocab.tokenizer.tokenize_str(case.forced.replace("Paris", "Paris\\u0000x\""),
                                         parse_special=True)
    assert other.valid_prefix(wrong) < len(wrong) or not other.matcher.is_accepting()
