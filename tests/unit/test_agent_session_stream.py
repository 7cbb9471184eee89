"""benchmarks/agent_session.py's reading of a streamed chat answer: the first token is the
first delta with text or a tool call (not the role chunk), and the counts come from the usage
chunk, or llama-server's timings for the cached tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from benchmarks.agent_session import read_stream


def sse(*chunks: dict) -> list[str]:
    return [f"data: {json.dumps(c)}" for c in chunks] + ["", "data: [DONE]"]


class Arrivals:
    """The lines as a network would deliver them: the clock reads 1, 2, 3... as each comes."""

    def __init__(self, lines: list[str]) -> None:
        self.lines, self.now = lines, 0.0

    def __iter__(self) -> Iterator[str]:
        for line in self.lines:
            self.now += 1.0
            yield line

    def clock(self) -> float:
        return self.now


def delta(**fields: object) -> dict:
    return {"choices": [{"index": 0, "delta": fields}]}


def test_the_first_token_is_the_first_delta_with_output_and_usage_gives_the_counts() -> None:
    stream = Arrivals(sse(
        delta(role="assistant", content=None), delta(content=""), delta(content="Port"),
        delta(content=" 8080"),
        {"choices": [], "usage": {"prompt_tokens": 12100, "completion_tokens": 2,
                                  "prompt_tokens_details": {"cached_tokens": 12000}}}))
    reply = read_stream(stream, 0.5, stream.clock)
    assert reply.ttft_s == 2.5  # "Port", the third line: not the role or the empty content
    assert reply.total_s == 6.5  # [DONE], the seventh
    assert (reply.text, reply.prompt_tokens, reply.cached_tokens, reply.completion_tokens) == \
        ("Port 8080", 12100, 12000, 2)


def test_a_tool_call_delta_is_a_first_token_and_timings_give_the_cached_tokens() -> None:
    stream = Arrivals(sse(
        delta(tool_calls=[{"index": 0, "id": "c1",
                           "function": {"name": "Read", "arguments": ""}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '{"file_path": "a"}'}}]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
         "usage": {"prompt_tokens": 50, "completion_tokens": 9}, "timings": {"cache_n": 48}}))
    reply = read_stream(stream, 0.0, stream.clock)
    assert (reply.ttft_s, reply.total_s, reply.tool_calls, reply.cached_tokens) == \
        (1.0, 5.0, 1, 48)


def test_no_output_leaves_no_first_token_and_an_error_chunk_raises() -> None:
    stream = Arrivals(sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
    reply = read_stream(stream, 0.0, stream.clock)
    assert reply.ttft_s is None and reply.total_s == 3.0
    with pytest.raises(RuntimeError, match="context is full"):
        read_stream(sse({"error": {"message": "the context is full"}}), 0.0, lambda: 1.0)


def test_the_rewrite_compares_decoding_speed_with_and_without_prompt_lookup():
    from benchmarks.agent_session import Reply, compare, decode_rate

    # 101 tokens, the first at 2 s, the last at 12 s: 100 tokens in 10 s
    assert decode_rate(Reply(ttft_s=2.0, total_s=12.0, completion_tokens=101)) == 10.0
    assert decode_rate(Reply(ttft_s=None, total_s=3.0, completion_tokens=0)) is None
    ember = {"session_ttft_s": [10.0, 1.0], "rewrite_decode_tok_s": {
        "default": 30.0, "speculation_off": 20.0}}
    llama = {"session_ttft_s": [10.0, 1.0], "rewrite_decode_tok_s": {"default": 24.0}}
    ratios, goals = compare(ember, llama)
    assert ratios["rewrite_decode_vs_llama_server"] == 1.25
    assert ratios["rewrite_decode_lookup_vs_off"] == 1.5
    assert all(goals.values())
