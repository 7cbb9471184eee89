"""Thinking switched off and on through a family's own template variable, on the real
templates: Kimi K3's boolean `thinking` and MiniMax-M3's `thinking_mode` ("disabled",
"enabled"; "adaptive", the model's choice, when the request does not say). Off, the
answer is read as an answer; on, the prompt opens the thinking and the parser reads it."""

from __future__ import annotations

import pytest

from backends.base import GenerationRequest, Message, ReasoningEvent, Thinking, TokenEvent
from tests.support.families import chat

MESSAGES = (Message("user", "Capital of France?"),)
K3, M3 = "Kimi-K3", "MiniMax-M3"


def render(name: str, enabled: bool | None) -> tuple[str, GenerationRequest]:
    request = GenerationRequest(messages=MESSAGES, thinking=Thinking(enabled=enabled))
    return chat(name).render(MESSAGES, request), request


def answer(name: str, enabled: bool | None, output: str) -> tuple[str, str]:
    ct = chat(name)
    prompt, request = render(name, enabled)
    parser = ct.parser(request, prompt)
    events = [*parser.feed(output), *parser.finish()]
    return ("".join(e.text for e in events if isinstance(e, TokenEvent)),
            "".join(e.text for e in events if isinstance(e, ReasoningEvent)))


@pytest.mark.parametrize("name", [K3, M3])
def test_the_template_has_a_switch(name):
    assert chat(name).fmt.thinking_toggle


def test_kimi_k3_off_opens_the_response_and_on_the_thinking():
    off, _ = render(K3, False)
    on, _ = render(K3, True)
    default, _ = render(K3, None)
    assert off.endswith("<|open|>response<|sep|>")
    assert on.endswith("<|open|>think<|sep|>") and default == on  # K3 thinks unless told
    assert answer(K3, False, "Paris.<|close|>response<|sep|><|close|>message<|sep|>") == (
        "Paris.", "")
    assert answer(K3, True, "Berlin? No: Paris.<|close|>think<|sep|><|open|>response<|sep|>"
                            "Paris.<|close|>response<|sep|>") == ("Paris.", "Berlin? No: Paris.")


def test_minimax_m3_modes():
    off, _ = render(M3, False)
    on, _ = render(M3, True)
    adaptive, _ = render(M3, None)
    assert "Current thinking mode: disabled" in off and off.rstrip().endswith("</mm:think>")
    assert "Current thinking mode: enabled" in on and on.rstrip().endswith("<mm:think>")
    assert "Current thinking mode: adaptive" in adaptive
    assert answer(M3, False, "Paris.") == ("Paris.", "")
    assert answer(M3, True, "Easy.</mm:think>Paris.") == ("Paris.", "Easy.")


def test_kimi_k3_forced_call_with_thinking_off_starts_at_once():
    """Thinking off, the grammar of a forced call neither opens a thinking nor lets text
    run before the call: the prompt opened the response frame, which it may close."""
    from backends.base import ToolChoice
    from backends.grammar import request_constraint
    from tests.unit.test_format_json_families import TOOLS, k3_call, k3_tools
    from tests.unit.test_format_xml_families import qwen_vocab

    vocab = qwen_vocab()
    ct = chat(K3)
    request = GenerationRequest(messages=MESSAGES, tools=TOOLS,
                                tool_choice=ToolChoice("function", "get_weather"),
                                thinking=Thinking(enabled=False))
    prompt = ct.render(MESSAGES, request)
    encode = vocab.tokenizer.tokenize_str

    def takes(text: str) -> bool:
        constraint = request_constraint(request, ct.fmt, vocab, prompt[-40:])
        assert constraint is not None
        ids = encode(text)
        return constraint.valid_prefix(ids) == len(ids)

    call = k3_tools(k3_call("get_weather", '{"city": "Paris"}'))
    assert takes(call) and takes("<|close|>response<|sep|>" + call)
    assert not takes("The weather in Paris")
    assert not takes("<|open|>think<|sep|>Hm.<|close|>think<|sep|>" + call)
