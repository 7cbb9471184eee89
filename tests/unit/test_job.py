"""The request bookkeeping every local backend shares (backends.job.BaseJob) and the Stats
formula every backend uses (backends.stats.request_stats), without a model."""

from __future__ import annotations

import threading

from backends.base import DoneEvent, GenerationRequest, TokenEvent
from backends.job import BaseJob
from backends.stats import request_stats
from backends.text import TextStream


def test_stats_count_decode_speed_from_the_first_token_on():
    stats = request_stats(prompt_tokens=30, completion_tokens=11, started=10.0, first_at=10.5,
                          last_at=12.5, end=12.6, finish_reason="length", truncated=False,
                          cached_tokens=16, draft_tokens=8, accepted_tokens=5)
    assert stats.ttft_s == 0.5 and stats.total_s == 2.6
    assert stats.decode_tokens_per_s == 5.0  # 10 tokens after the first, in 2 s
    assert (stats.cached_tokens, stats.draft_tokens, stats.accepted_tokens) == (16, 8, 5)


def test_stats_of_an_answer_with_one_token_or_none_have_no_decode_speed():
    one = request_stats(prompt_tokens=3, completion_tokens=1, started=0.0, first_at=0.2,
                        last_at=0.2, end=0.3, finish_reason="stop", truncated=True)
    none = request_stats(prompt_tokens=3, completion_tokens=0, started=0.0, first_at=None,
                         last_at=None, end=0.123456, finish_reason="cancelled",
                         truncated=False)
    assert one.decode_tokens_per_s == none.decode_tokens_per_s == 0.0
    assert none.ttft_s == none.total_s == 0.1235  # no token: the whole wait, rounded


def test_a_job_streams_safe_text_and_ends_with_what_the_stop_holdback_kept():
    flag = threading.Event()
    job = BaseJob("s1", GenerationRequest(prompt="x"), flag, truncated=False,
                  text=TextStream(("STOP",)))
    assert job.emitted(b"hello ") == [("s1", TokenEvent("hello "))]
    assert job.emitted(b"ST") == []  # could be the start of the stop string: held back
    assert job.first_at is not None and job.last_at >= job.first_at
    assert not job.is_cancelled()
    flag.set()
    assert job.is_cancelled()
    rest, (stream, done) = job.finish("cancelled", prompt_tokens=1, completion_tokens=2,
                                      cached_tokens=0)
    assert rest == ("s1", TokenEvent("ST")) and stream == "s1"
    assert isinstance(done, DoneEvent) and done.text == "hello ST"
    assert done.stats.finish_reason == "cancelled" and done.stats.completion_tokens == 2


def test_the_stop_string_that_ended_an_answer_is_in_its_stats():
    job = BaseJob("s2", GenerationRequest(prompt="x"), None, truncated=False,
                  text=TextStream(("END", "ST", "OP")))
    assert job.emitted(b"one STOP") == [("s2", TokenEvent("one "))]
    assert job.text.stopped and job.text.matched == "ST"  # the earliest in the text
    *_, (_, done) = job.finish("stop", prompt_tokens=1, completion_tokens=2, cached_tokens=0)
    assert isinstance(done, DoneEvent) and done.text == "one "
    assert done.stats.stop_sequence == "ST"


def test_an_answer_the_model_ended_names_no_stop_string():
    job = BaseJob("s3", GenerationRequest(prompt="x"), None, truncated=False,
                  text=TextStream(("END",)))
    job.emitted(b"the EN")  # held back: it could have been END
    *_, (_, done) = job.finish("stop", prompt_tokens=1, completion_tokens=2, cached_tokens=0)
    assert isinstance(done, DoneEvent) and done.text == "the EN"
    assert done.stats.stop_sequence is None


def test_of_two_stop_strings_found_at_one_place_the_first_given_is_named():
    text = TextStream(("ab", "a"))
    assert text.push(b"xxab") == "xx"
    assert text.matched == "ab"
