"""A marker counts only as its token where the backend has token ids: a model that writes
the text of `<tool_call>` or `</think>` with ordinary tokens (quoting the format, inside an
argument, in its reasoning) has not called anything nor stopped thinking. Replayed through
real vocabularies, as the llama.cpp backend streams them."""

from __future__ import annotations

import json

import pytest

from backends.base import GenerationRequest, Message, ReasoningEvent, TokenEvent
from backends.chat_format.families import THINK
from backends.chat_format.markers import TOKEN_END, TOKEN_START, TokenMarkedParser
from backends.chat_format.tagged import TaggedParser
from backends.job import BaseJob
from backends.text import TextStream
from tests.support.families import chat
from tests.support.token_stream import TIME, WEATHER, Vocab

REQUEST = GenerationRequest(messages=(Message("user", "Weather in Paris?"),),
                            tools=(WEATHER, TIME))


@pytest.fixture(scope="module")
def qwen_vocab(qwen):
    """The real Qwen2.5-Coder-0.5B's vocabulary, whose <tool_call> is one added token (the
    vendored ggml-vocab-qwen2.gguf lacks Qwen2.5's tool tokens)."""
    return Vocab(qwen.path)


def stream(template: str, v: Vocab, parts: list[tuple[str, bool]]):
    """The DoneEvent of an output given as (text, as special tokens?) parts: a part with
    False is tokenized a character at a time, so its markers are ordinary tokens (llama.cpp
    reads an added token such as Qwen's <tool_call> even without parse_special)."""
    ct = chat(template)
    prompt = ct.render(REQUEST.messages or (), REQUEST)
    pieces = ct.use_marker_tokens(v.tokenize)
    job = BaseJob("s", REQUEST, None, truncated=False, text=TextStream(()),
                  output=ct.parser(REQUEST, prompt))
    for text, special in parts:
        ids = v.model.tokenize(text.encode(), add_bos=False, special=True) if special \
            else [i for ch in text for i in v.model.tokenize(ch.encode(), add_bos=False,
                                                             special=False)]
        for token in ids:
            job.emitted(pieces.get(token) or v.piece(token))
    return job.finish("stop", prompt_tokens=1, completion_tokens=1, cached_tokens=0)[-1][1]


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_a_call_written_with_its_marker_tokens_is_a_call(qwen_vocab):
    done = stream("Qwen-Qwen2.5-7B-Instruct", qwen_vocab, [(CALL, True)])
    assert [(c.name, json.loads(c.arguments)) for c in done.tool_calls] == \
        [("get_weather", {"city": "Paris"})]
    assert done.text == ""


def test_the_same_text_in_ordinary_tokens_is_answer_text(qwen_vocab):
    quoted = f"Qwen writes calls like this: {CALL} and then stops."
    done = stream("Qwen-Qwen2.5-7B-Instruct", qwen_vocab, [(quoted, False)])
    assert done.tool_calls == ()
    assert done.text == quoted


def test_a_marker_text_inside_an_argument_is_kept_whole(qwen_vocab):
    parts = [('<tool_call>', True),
             ('\n{"name": "get_weather", "arguments": {"city": "a </tool_call> b"}}\n', False),
             ("</tool_call>", True)]
    done = stream("Qwen-Qwen2.5-7B-Instruct", qwen_vocab, parts)
    assert [json.loads(c.arguments) for c in done.tool_calls] == [{"city": "a </tool_call> b"}]


def test_thinking_ends_at_the_token_not_at_its_text():
    """As a backend marks a token: its text between the private-use characters."""
    parser = TokenMarkedParser(TaggedParser(None, THINK), ("<think>", "</think>"))
    events = []
    for piece in (f"{TOKEN_START}<think>{TOKEN_END}", "I must not write </thi", "nk> too ",
                  "early.", f"{TOKEN_START}</think>{TOKEN_END}", "\n\nIt is sunny."):
        events += parser.feed(piece)
    events += parser.finish()
    assert "".join(e.text for e in events if isinstance(e, ReasoningEvent)) == \
        "I must not write </think> too early."
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == "It is sunny."
