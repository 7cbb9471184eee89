"""One client cannot hurt another's request (issue 37), on the real 0.5B model through a
real uvicorn server: a non-streaming request whose client goes stops and frees its slot; a
client asking for another context waits for the others' answers instead of ending them;
/health answers while a model loads."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx

from tests.support.live_server import live_server

COUNT = "Count from 1 to 1000, one number per line, with no other text."


def raw_post(url: str, path: str, body: dict) -> socket.socket:
    """A POST sent on a socket the test closes itself (the client going away)."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)))
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                 .encode() + data)
    return sock


def active_requests(url: str) -> int:
    metrics = httpx.get(url + "/metrics").text
    return int(metrics.split("\nember_active_requests ")[1].split()[0])


def test_a_non_streaming_request_whose_client_goes_frees_its_slot(store, qwen):
    with live_server(store, parallel=1) as (url, runtime):
        httpx.post(url + "/api/generate", timeout=120,  # load, small context: fast reloads
                   json={"model": qwen.ref, "options": {"num_ctx": 2048}})
        for path, body in [("/v1/chat/completions", {"max_tokens": 2000, "temperature": 0}),
                           ("/api/chat", {"options": {"num_predict": 2000, "temperature": 0}})]:
            sock = raw_post(url, path, {"model": qwen.ref, "stream": False,
                                        "messages": [{"role": "user", "content": COUNT}],
                                        **body})
            sent = time.monotonic()  # admitted within seconds, even on a busy machine
            while not active_requests(url) and time.monotonic() - sent < 30:
                time.sleep(0.05)
            time.sleep(1.5)  # decoding its long (greedy: 1 to 1000) answer
            assert active_requests(url) == 1, f"{path}: the request ended on its own"
            sock.close()
            gone = time.monotonic()
            while active_requests(url) and time.monotonic() - gone < 30:
                time.sleep(0.05)
            freed = time.monotonic() - gone
            print(f"{path}: its place was free {freed:.2f} s after the client went")
            # the 2000-token answer takes far longer here: it stopped with its client
            assert freed < 5, f"{path}: the request ran on {freed:.1f} s without its client"
            r = httpx.post(url + "/v1/chat/completions", timeout=120, json={
                "model": qwen.ref, "max_tokens": 4,
                "messages": [{"role": "user", "content": "Say hi"}]})
            assert r.status_code == 200


def test_another_clients_num_ctx_waits_for_a_running_stream_instead_of_ending_it(store, qwen):
    with live_server(store, parallel=2) as (url, runtime):
        httpx.post(url + "/api/generate", timeout=120,  # load, small context: fast reloads
                   json={"model": qwen.ref, "options": {"num_ctx": 2048}})
        before = runtime.loaded()[0].plan.context
        lines: list[dict] = []
        streaming = threading.Event()

        def stream() -> None:
            with httpx.stream("POST", url + "/api/chat", timeout=120, json={
                    "model": qwen.ref, "options": {"num_predict": 24, "temperature": 0},
                    "messages": [{"role": "user", "content": COUNT}]}) as r:
                for line in r.iter_lines():
                    lines.append(json.loads(line))
                    streaming.set()

        first = threading.Thread(target=stream)
        first.start()
        assert streaming.wait(60)
        r = httpx.post(url + "/api/chat", timeout=180, json={
            "model": qwen.ref, "stream": False, "options": {"num_ctx": before // 2,
                                                           "num_predict": 4},
            "messages": [{"role": "user", "content": "Say hi"}]})
        first.join(120)
        assert lines[-1]["done"] is True and "error" not in lines[-1], lines[-1]
        assert lines[-1]["eval_count"] == 24  # the whole answer, not cut by the reload
        assert r.status_code == 200, r.text
        assert runtime.loaded()[0].plan.context == before // 2


def test_health_answers_while_a_16k_context_loads(store, qwen):
    with live_server(store, parallel=1) as (url, runtime):
        loading = threading.Thread(target=runtime.load, args=(qwen.ref, 16384))
        loading.start()
        seen: list[tuple[float, dict]] = []
        with httpx.Client(timeout=30) as client:
            while loading.is_alive():
                started = time.monotonic()
                r = client.get(url + "/health")
                seen.append((time.monotonic() - started, r.json()))
                client.get(url + "/metrics").raise_for_status()
                time.sleep(0.02)
        loading.join()
        during = [latency for latency, body in seen if body.get("loading") == [qwen.ref]]
        assert during, "no /health answer came while the model loaded"
        print(f"/health during the load: {len(during)} answers, slowest "
              f"{max(during) * 1000:.1f} ms")
        assert runtime.loaded()[0].plan.context == 16384
