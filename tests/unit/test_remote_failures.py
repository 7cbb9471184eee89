"""The remote backend against a server that misbehaves (tests/support/fake_openai.py), and
against no server at all: every failure is one clear error naming the endpoint, never a
traceback, and the app keeps serving afterwards."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Paths
from app.errors import ModelNotFoundError
from app.runtime import Runtime, endpoints
from app.store import Store
from backends.base import (
    DoneEvent,
    ErrorEvent,
    GenerationRequest,
    Message,
    SamplingParams,
    TokenEvent,
)
from backends.errors import BackendError, RemoteError
from backends.remote import Endpoint, Received, RemoteBackend, request_body
from tests.support import fake_openai
from tests.support.fake_openai import fake_server

ASK = GenerationRequest(messages=(Message("user", "hi"),),
                        sampling=SamplingParams(temperature=0, max_tokens=16))


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    with fake_server(slow_s=3.0) as url:
        yield url


def backend(url: str, timeout_s: float = 1.0) -> RemoteBackend:
    return RemoteBackend(Endpoint("fake", url, timeout_s=timeout_s))


def run(url: str, model: str, timeout_s: float = 1.0) -> list:
    b = backend(url, timeout_s)
    try:
        return list(b.generate(model, ASK))
    finally:
        b.close()


def refused_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once this socket closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_well_behaved_stream_gives_tokens_then_stats_counted_from_chunks(fake):
    events = run(fake, "ok")
    assert [e.text for e in events if isinstance(e, TokenEvent)] == ["Hello", " world"]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.text == "Hello world"
    # no usage from this server: one chunk is counted as one token
    assert done.stats.completion_tokens == 2 and done.stats.finish_reason == "stop"
    assert done.stats.ttft_s > 0 and done.stats.total_s >= done.stats.ttft_s


def test_a_slow_server_is_a_timeout_error_naming_the_endpoint(fake):
    started = time.monotonic()
    events = run(fake, "slow", timeout_s=1.0)
    assert time.monotonic() - started < 2.5  # the 1 s timeout, not the server's 3 s
    assert len(events) == 1 and isinstance(events[0], ErrorEvent)
    assert "remote 'fake'" in events[0].message
    assert "timed out after 1 s without data" in events[0].message


def test_a_stream_that_stalls_mid_answer_times_out_keeping_the_partial_text(fake):
    events = run(fake, "stall", timeout_s=1.0)
    assert [e.text for e in events if isinstance(e, TokenEvent)] == ["Hel"]
    assert isinstance(events[-1], ErrorEvent) and events[-1].partial == "Hel"
    assert "timed out" in events[-1].message and "after 3 characters" in events[-1].message


def test_a_dropped_stream_is_a_clear_error_and_the_partial_text_is_kept(fake):
    events = run(fake, "drop")
    tokens = [e.text for e in events if isinstance(e, TokenEvent)]
    assert "".join(tokens) == "The answer is "
    error = events[-1]
    assert isinstance(error, ErrorEvent) and error.partial == "The answer is "
    assert "connection dropped while streaming the answer, after 14 characters" in error.message
    assert "Traceback" not in error.message


def test_garbage_in_the_stream_is_a_clear_error_quoting_it(fake):
    events = run(fake, "garbage")
    assert isinstance(events[-1], ErrorEvent)
    assert "not an OpenAI-compatible answer: '{this is not json'" in events[-1].message
    assert events[-1].partial == "Hel"


def test_an_html_page_instead_of_a_stream_is_a_clear_error(fake):
    events = run(fake, "html")
    assert len(events) == 1 and isinstance(events[0], ErrorEvent)
    assert "not an OpenAI-compatible answer" in events[0].message
    assert "Please log in" in events[0].message


def test_a_500_is_a_clear_error_with_the_servers_message(fake):
    events = run(fake, "fail")
    assert len(events) == 1 and isinstance(events[0], ErrorEvent)
    assert events[0].message == ("remote 'fake' (" + fake + ") failed with HTTP 500: "
                                 "CUDA out of memory")


def test_a_refused_connection_is_a_clear_error_when_listing_and_generating():
    url = refused_url()
    with pytest.raises(RemoteError, match=r"cannot connect while listing its models .*"
                                          r"is the server running"):
        backend(url).list_models()
    events = run(url, "anything")
    assert len(events) == 1 and "cannot connect while answering" in events[0].message


def test_a_model_list_that_is_not_json_is_a_clear_error():
    with fake_server(models_garbage=True) as url, pytest.raises(
            RemoteError, match="did not answer with an OpenAI model list"):
        backend(url).list_models()


def test_a_url_without_a_path_means_its_v1_and_one_with_a_path_is_kept():
    assert Endpoint("a", "http://h:8000").base == "http://h:8000/v1"
    assert Endpoint("a", "http://h:8000/").base == "http://h:8000/v1"
    assert Endpoint("a", "https://openrouter.ai/api/v1").base == "https://openrouter.ai/api/v1"


def test_sampling_settings_map_to_openai_fields_and_engine_extras_only_when_set():
    plain = request_body("m", GenerationRequest(
        messages=(Message("user", "hi"),),
        sampling=SamplingParams(temperature=0.2, top_p=0.9, seed=7, stop=("END",),
                                max_tokens=20)), stream=True)
    assert {k: plain[k] for k in ("model", "temperature", "top_p", "seed", "stop",
                                  "max_tokens")} == {
        "model": "m", "temperature": 0.2, "top_p": 0.9, "seed": 7, "stop": ["END"],
        "max_tokens": 20}
    assert plain["stream_options"] == {"include_usage": True}
    assert not {"top_k", "min_p", "repetition_penalty"} & set(plain)
    tuned = request_body("m", GenerationRequest(prompt="x", sampling=SamplingParams(
        top_k=5, min_p=0.1, repeat_penalty=1.2)), stream=False)
    assert (tuned["top_k"], tuned["min_p"], tuned["repetition_penalty"]) == (5, 0.1, 1.2)
    assert tuned["prompt"] == "x" and "messages" not in tuned and "stream_options" not in tuned
    schema = {"type": "object"}
    js = request_body("m", GenerationRequest(prompt="x", json_schema=schema), stream=True)
    assert js["response_format"]["json_schema"]["schema"] == schema


# -- through the Runtime: the app survives every failure ----------------------------------
@pytest.fixture
def fake_runtime(tmp_path: Path, fake: str) -> Iterator[Runtime]:
    paths = Paths(tmp_path / "home")
    endpoints.add("fake", fake, paths=paths)
    with Runtime(store=Store(paths)) as rt:
        yield rt


def test_runtime_routes_name_slash_model_to_the_endpoint_and_survives_its_failures(
        fake_runtime):
    rt = fake_runtime
    with pytest.raises(BackendError, match="connection dropped") as failed:
        rt.generate("fake/drop", ASK).result()
    assert failed.value.partial == "The answer is "
    with pytest.raises(BackendError, match="HTTP 500"):
        rt.generate("fake/fail", ASK).result()
    text, stats = rt.generate("fake/ok", ASK).result()  # still serving
    assert text == "Hello world" and stats.finish_reason == "stop"


def test_unknown_endpoint_and_unknown_remote_model_are_not_found_errors(fake_runtime):
    with pytest.raises(ModelNotFoundError, match="unknown model 'fak' in the remote endpoints; "
                                                 "did you mean fake"):
        fake_runtime.check_model("fak/ok")
    with pytest.raises(ModelNotFoundError, match="unknown model 'okk' in the remote 'fake'"):
        fake_runtime.check_model("fake/okk")
    fake_runtime.check_model("fake/ok")


def test_one_unreachable_endpoint_does_not_hide_the_others_models(tmp_path, fake):
    paths = Paths(tmp_path / "home")
    endpoints.add("fake", fake, paths=paths)
    endpoints.add("down", refused_url(), paths=paths)
    with Runtime(store=Store(paths)) as rt:
        models, failed = rt.remote_models()
    assert {m.ref for m in models} == {f"fake/{m}" for m in fake_openai.MODELS}
    assert list(failed) == ["down"] and "cannot connect" in failed["down"]


def test_cancelling_a_stalled_remote_generation_ends_it_at_once_as_cancelled(fake_runtime):
    generation = fake_runtime.generate("fake/stall", ASK)  # the fake stalls 3 s after "Hel"
    events = iter(generation)
    first = next(events)
    assert isinstance(first, TokenEvent) and first.text == "Hel"
    started = time.monotonic()
    generation.cancel()
    rest = list(events)
    assert time.monotonic() - started < 1.0  # not the server's 3 s stall
    assert len(rest) == 1 and isinstance(rest[0], DoneEvent)
    assert rest[0].stats.finish_reason == "cancelled" and rest[0].text == "Hel"


def test_a_servers_stop_reason_names_the_stop_string_only_when_it_is_one_of_the_request():
    """vLLM says which stop string ended the answer (`stop_reason`); a stop token's id, or a
    server that says nothing (OpenAI, llama-server), leaves it unknown."""
    def ended(stops: tuple[str, ...], choice: dict) -> str | None:
        run = Received(0.0, stops=stops)
        run.chunk({"choices": [{"index": 0, "delta": {"content": "hi"}}]})
        run.chunk({"choices": [{"index": 0, "delta": {}, **choice}]})
        return run.done().stats.stop_sequence

    assert ended(("END", "STOP"), {"finish_reason": "stop", "stop_reason": "STOP"}) == "STOP"
    assert ended(("END",), {"finish_reason": "stop", "stop_reason": 151645}) is None
    assert ended(("END",), {"finish_reason": "stop"}) is None
    assert ended(("END",), {"finish_reason": "length", "stop_reason": "END"}) is None
