"""The remote backend against a second Ember process (`ember serve` on loopback with an API
key, the real Qwen2.5-Coder-0.5B-Instruct), and its models through this Ember's Runtime, CLI
and HTTP API as NAME/model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import ollama
import openai
import pytest

from app.config import Paths
from app.runtime import Runtime, endpoints
from app.store import Store
from backends.base import DoneEvent, GenerationRequest, Message, SamplingParams, TokenEvent
from backends.errors import RemoteError
from backends.remote import Endpoint, RemoteBackend
from tests.support import REPO
from tests.support.live_server import free_port, live_server
from tests.support.models import QWEN, TEST_HOME

KEY = "upstream-key-42"
REF = f"lab/{QWEN}"


def greedy(text: str, max_tokens: int = 24, **kw) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),),
                             sampling=SamplingParams(temperature=0, max_tokens=max_tokens, **kw))


@pytest.fixture(scope="module")
def upstream(qwen, tmp_path_factory) -> Iterator[str]:
    """A second Ember process serving the test home's models, behind an API key."""
    home = tmp_path_factory.mktemp("upstream")
    (home / "models").symlink_to(TEST_HOME / "models")
    if (TEST_HOME / "hardware.json").exists():  # skip the bandwidth measurement
        shutil.copy(TEST_HOME / "hardware.json", home / "hardware.json")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--api-key", KEY,
         "--parallel", "2"], cwd=REPO, env={**os.environ, "EMBER_HOME": str(home)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
        if proc.poll() is not None:
            pytest.fail(f"ember serve exited: {proc.stderr.read()}")
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def client_home(upstream: str, tmp_path_factory) -> Paths:
    """This Ember's home: no models of its own, the upstream as remote "lab"."""
    paths = Paths(tmp_path_factory.mktemp("client"))
    endpoints.add("lab", upstream, KEY, paths=paths)
    return paths


@pytest.fixture(scope="module")
def rt(client_home: Paths) -> Iterator[Runtime]:
    with Runtime(store=Store(client_home)) as runtime:
        yield runtime


def test_lists_the_upstream_models_as_name_slash_model(rt):
    models, failed = rt.remote_models()
    assert failed == {}
    assert REF in [m.ref for m in models]
    assert all(m.endpoint == "lab" and m.owned_by == "ember" for m in models)


def test_streams_a_chat_token_by_token_with_the_servers_usage_and_measured_speed(rt):
    events = list(rt.generate(REF, greedy("Count from 1 to 30, separated by commas.", 12)))
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    done = events[-1]
    assert isinstance(done, DoneEvent) and len(tokens) >= 6
    assert done.text == "".join(t.text for t in tokens) and done.text.startswith("1, 2")
    st = done.stats
    assert st.completion_tokens == 12 and st.finish_reason == "length"
    assert st.prompt_tokens > 20  # the upstream's own count of the templated prompt
    assert 0 < st.ttft_s < st.total_s and st.decode_tokens_per_s > 0.5


def test_non_streaming_gives_the_same_greedy_answer_as_streaming(upstream):
    backend = RemoteBackend(Endpoint("lab", upstream, KEY))
    request = greedy("What is the capital of France? One word.", 8)
    streamed = [e for e in backend.generate(QWEN, request)][-1]
    whole = [e for e in backend.generate(QWEN, request, stream=False)]
    backend.close()
    assert len(whole) == 2 and isinstance(whole[1], DoneEvent)
    assert whole[1].text == streamed.text and "Paris" in whole[1].text
    assert whole[1].stats.completion_tokens == streamed.stats.completion_tokens


def test_stop_strings_reach_the_server_and_end_the_answer_before_them(rt):
    text, stats = rt.generate(REF, greedy("Count from 1 to 20, separated by commas.", 64,
                                          stop=("7",))).result()
    assert "6" in text and "7" not in text and stats.finish_reason == "stop"


def test_a_raw_prompt_goes_to_the_completions_endpoint(rt):
    request = GenerationRequest(prompt="def add(a, b):\n    return",
                                sampling=SamplingParams(temperature=0, max_tokens=6))
    text, stats = rt.generate(REF, request).result()
    assert "a + b" in text and stats.completion_tokens <= 6


def test_a_wrong_api_key_is_a_401_error_that_says_how_to_fix_it(upstream):
    backend = RemoteBackend(Endpoint("lab", upstream, "wrong-key"))
    with pytest.raises(RemoteError, match=r"refused access \(HTTP 401\): the API key was "
                                          r"rejected; set it with `ember remote add lab") as e:
        backend.list_models()
    assert e.value.status == 401
    events = list(backend.generate(QWEN, greedy("hi")))
    assert len(events) == 1 and "HTTP 401" in events[0].message
    backend.close()


def test_cancelling_stops_the_stream_and_reports_cancelled(rt):
    generation = rt.generate(REF, greedy("Write a long story about a dragon.", 400))
    seen = 0
    for event in generation:
        if isinstance(event, TokenEvent):
            seen += 1
            if seen == 3:
                generation.cancel()
        elif isinstance(event, DoneEvent):
            assert event.stats.finish_reason == "cancelled"
            assert event.stats.completion_tokens < 40
            break
    else:
        pytest.fail("no final event")


def test_this_servers_api_serves_remote_models_beside_local_ones(client_home):
    with live_server(Store(client_home)) as (url, _):
        oai = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        assert REF in [m.id for m in oai.models.list()]
        chunks = oai.chat.completions.create(
            model=REF, messages=[{"role": "user", "content": "Say hello in French."}],
            temperature=0, max_tokens=8, stream=True)
        pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        assert len([p for p in pieces if p]) >= 2 and "Bonjour" in "".join(pieces)
        tags = httpx.get(url + "/api/tags").json()["models"]
        assert REF in [t["name"] for t in tags]
        shown = httpx.post(url + "/api/show", json={"model": REF}).json()
        assert shown["details"]["format"] == "remote" and "chat" in shown["capabilities"]
        answer = ollama.Client(host=url).chat(
            model=REF, messages=[{"role": "user", "content": "Say hello in French."}],
            options={"temperature": 0, "num_predict": 8}, stream=False)
        assert "Bonjour" in answer.message.content and answer.eval_count == 8
        with pytest.raises(openai.NotFoundError, match="unknown model 'nope'"):
            oai.chat.completions.create(model="lab/nope", max_tokens=4,
                                        messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError, match="unknown backend 'tpu'"):
            oai.chat.completions.create(model=REF, max_tokens=4, extra_body={"backend": "tpu"},
                                        messages=[{"role": "user", "content": "hi"}])


def ember(home: Paths, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "EMBER_HOME": str(home.home)})


def test_ember_run_and_list_use_remote_models_by_name(client_home):
    r = ember(client_home, "run", REF, "What is 2+2? Answer with a number.", "--temperature",
              "0", "--max-tokens", "8", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"] == "remote" and out["model"] == REF and "4" in out["text"]
    assert out["prompt_tokens"] > 0 and out["completion_tokens"] <= 8
    listed = ember(client_home, "list")
    assert REF in listed.stdout and "remote" in listed.stdout


def test_ember_chat_talks_to_a_remote_model(client_home):
    r = ember(client_home, "chat", REF, "--temperature", "0", "--max-tokens", "8",
              stdin="Say hello in French.\n/bye\n")
    assert r.returncode == 0, r.stderr
    assert "Bonjour" in r.stdout and "on its remote server" in r.stderr
