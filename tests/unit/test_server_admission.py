"""Admission comes first (app.server.bridge.Admission): a request that would wait past the
queue limit gets its 429 before any model load or prompt count, in one step under the lock,
so a burst cannot slip past the limit; every place taken is given back. The real app on a
scripted runtime (tests/support/fake_runtime) whose loads wait until the test lets them go."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from app.server.bridge import Admission
from backends.base import GenerationRequest
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


class SlowLoads(ScriptedRuntime):
    """Loading (fit_context) waits for `go`; counts the loads it was asked for."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.go = threading.Event()
        self.loads = 0
        self.count_lock = threading.Lock()

    def fit_context(self, name: str, request: GenerationRequest, backend: str | None = None,
                    context: int | None = None) -> int:
        with self.count_lock:
            self.loads += 1
        assert self.go.wait(30)
        return 7


def test_a_burst_of_three_times_the_limit_gets_exactly_the_expected_429s_and_loads():
    runtime = SlowLoads()
    parallel, queue_limit = 1, 2
    burst = 3 * (parallel + queue_limit)
    with served(runtime, parallel=parallel, queue_limit=queue_limit) as client:
        app = client.app
        admission = app.state.admission  # type: ignore[attr-defined]
        with ThreadPoolExecutor(burst) as pool:
            futures = [pool.submit(client.post, path, json=CHAT)
                       for path in ["/v1/chat/completions", "/api/chat", "/v1/messages"] * 3]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until each request is refused or loading
                if sum(f.done() for f in futures) + runtime.loads >= burst:
                    break
                time.sleep(0.01)
            busy = [f.result() for f in futures if f.done()]
            assert runtime.loads == parallel + queue_limit  # nothing loaded for the refused
            runtime.go.set()
            answers = [f.result() for f in futures]
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [200] * (parallel + queue_limit) + [429] * (burst - parallel - queue_limit)
    assert all(r.status_code == 429 for r in busy)
    assert all(int(r.headers["retry-after"]) >= 1 for r in answers if r.status_code == 429)
    assert admission.active == 0  # every place given back


def test_a_place_is_given_back_once_however_the_request_ends():
    admission = Admission(capacity=1, queue_limit=0)
    ticket = admission.admit()
    ticket.release()
    ticket.release()
    assert admission.active == 0
    with admission.admit():
        assert admission.active == 1
    assert admission.active == 0
