"""What front ends need to join a running Ember service, model-free: the endpoint and key
files of the data folder, the choice of Runtime, Ember's load routes, and the extension
fields a joined front end sends (its backend, and its policy of dropping old turns)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from app.config import Paths
from app.runtime.choose import choose_runtime, describe
from app.runtime.runtime import LoadedModel, Runtime
from app.runtime.service_runtime import ServiceBackend
from app.service.endpoint import (
    endpoint_file,
    read_endpoint,
    service_key,
    write_endpoint,
    write_key,
)
from backends.base import GenerationRequest, LoadPlan, Message, SamplingParams
from backends.remote import Endpoint
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served
from tests.support.live_server import free_port


def test_the_key_is_one_private_line_and_the_endpoint_reads_back(tmp_path: Path):
    paths = Paths(tmp_path)
    assert service_key(paths) is None and read_endpoint(paths) is None
    write_key(paths, "k-1 \n")
    key_file = tmp_path / "service" / "api-key"
    assert key_file.read_text() == "k-1\n" and service_key(paths) == "k-1"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    written = write_endpoint(paths, "http://127.0.0.1:11435/", os.getpid())
    assert read_endpoint(paths) == written
    assert (written.url, written.pid) == ("http://127.0.0.1:11435", os.getpid())


def test_a_damaged_endpoint_file_is_no_service(tmp_path: Path):
    paths = Paths(tmp_path)
    write_endpoint(paths, "http://127.0.0.1:1", 1)
    endpoint_file(paths).write_text('{"url": "http://127.0.0.1:1"')
    assert read_endpoint(paths) is None


def test_a_service_that_does_not_answer_leaves_the_runtime_in_process(tmp_path: Path):
    paths = Paths(tmp_path)
    write_key(paths, "k")
    write_endpoint(paths, f"http://127.0.0.1:{free_port()}", 1)  # nothing listens there
    rt = choose_runtime(paths)
    assert type(rt) is Runtime and not rt.is_service
    assert describe(rt).startswith("Models run in this process")


def request(truncate: bool) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", "hi"),), sampling=SamplingParams(),
                             truncate=truncate)


def test_a_joined_front_end_sends_its_backend_and_its_turn_dropping_policy():
    client = ServiceBackend(Endpoint("Ember service", "http://127.0.0.1:1", "k"), "cuda")
    body = client.body("m", request(truncate=True), stream=True)
    assert body["backend"] == "cuda" and body["truncate"] is True
    plain = ServiceBackend(Endpoint("Ember service", "http://127.0.0.1:1", "k"))
    assert "backend" not in plain.body("m", request(False), True)
    assert "truncate" not in plain.body("m", request(False), True)
    assert client.where == "the Ember service at http://127.0.0.1:1"
    client.close()
    plain.close()


def test_the_chat_route_drops_old_turns_only_when_asked():
    runtime = ScriptedRuntime()
    with served(runtime) as http:
        for asked in (True, False):
            r = http.post("/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                **({"truncate": True} if asked else {})})
            assert r.status_code == 200, r.text
            assert runtime.requests[-1].truncate is asked


@dataclass
class LoadingRuntime(ScriptedRuntime):
    loads: list = field(default_factory=list)
    unloaded: list = field(default_factory=list)

    def _loaded(self) -> LoadedModel:
        plan = LoadPlan(context=8192, threads=4, gpu_layers=-1, reason="as asked",
                        memory_bytes=5, gpu_memory_bytes=3, kv_cache="q8_0")
        return LoadedModel(SimpleNamespace(ref=f"{MODEL}:Q4_K_M"), plan,  # type: ignore
                           "llamacpp", 4242)

    def load(self, *args: object, **kw: object) -> LoadedModel:  # type: ignore[override]
        self.loads.append((args, kw))
        return self._loaded()

    def loaded(self) -> list:
        return [self._loaded()]

    def unload(self, name: str) -> bool:
        self.unloaded.append(name)
        return True


def test_the_load_routes_take_every_setting_and_list_worker_pids():
    runtime = LoadingRuntime()
    with served(runtime) as http:
        r = http.post("/ember/load", json={"model": MODEL, "context": 8192,
                                           "gpu_layers": -1, "kv_cache": "q8_0"})
        assert r.status_code == 200, r.text
        assert r.json()["pid"] == 4242 and r.json()["kv_cache"] == "q8_0"
        assert runtime.loads == [((MODEL, 8192, None, -1), {"quant": None, "kv_cache": "q8_0"})]
        listed = http.get("/ember/loaded").json()["models"]
        assert [(m["model"], m["context"], m["pid"]) for m in listed] == [
            (f"{MODEL}:Q4_K_M", 8192, 4242)]
        assert http.post("/ember/unload", json={"model": MODEL}).json()["unloaded"] is True
        assert runtime.unloaded == [MODEL]
        bad = http.post("/ember/load", json={"model": MODEL, "kv_cache": "q2"})
        assert bad.status_code == 400
        remote = http.post("/ember/load", json={"model": "lab/x"})
        assert remote.status_code == 400 and "remote model" in remote.text


def test_a_question_with_an_image_goes_to_the_service_as_content_parts():
    from backends.media import MEDIA_MARKER, Media

    client = ServiceBackend(Endpoint("Ember service", "http://127.0.0.1:1", "k"))
    image = Media("image", bytes(3), 1, 1)
    asked = GenerationRequest(
        messages=(Message("user", MEDIA_MARKER + "what is this?", media=(image,)),),
        sampling=SamplingParams())
    parts = client.body("m", asked, True)["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text"]
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    client.close()


def test_dropped_turns_come_back_through_the_usage_extension():
    import time

    from app.server.openai.wire import usage
    from backends.base import Stats
    from backends.remote import Received

    def stats(truncated: bool) -> Stats:
        return Stats(prompt_tokens=9, completion_tokens=2, ttft_s=0.1, decode_tokens_per_s=9.0,
                     finish_reason="stop", total_s=0.3, truncated=truncated)

    sent = usage(stats(True)).model_dump()
    assert sent["truncated"] is True
    assert usage(stats(False)).truncated is None
    for said, seen in ((sent, True), ({**sent, "truncated": None}, False)):
        received = Received(time.monotonic())
        received.usage, received.finish = said, "stop"
        assert received.done().stats.truncated is seen


def test_a_service_that_stops_answering_is_logged_once_until_it_answers_again(
        tmp_path: Path, caplog):
    import logging

    from app.runtime.service_runtime import ServiceRuntime
    from app.store import Store
    from tests.support.live_server import live_server

    paths, port = Paths(tmp_path), free_port()
    rt = ServiceRuntime(f"http://127.0.0.1:{port}", "k", Store(paths))
    with caplog.at_level(logging.INFO, logger="app.runtime.service_runtime"):
        assert [rt.loaded() for _ in range(3)] == [[], [], []]  # the window's polls
        with live_server(Store(paths), port=port, api_key="k"):
            assert rt.loaded() == [] and rt.loaded() == []
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "did not answer while listing" in said[0], said
    assert said[1] == f"the Ember service at http://127.0.0.1:{port} answers again"
    rt.shutdown()
