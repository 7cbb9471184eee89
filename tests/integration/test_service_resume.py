"""A conversation survives the service's restart (issue 43), as a user meets it: a real
supervised `ember service` (no systemd user manager runs in the test container) on the real
Qwen2.5-Coder-0.5B, a ~2,000-token conversation through its OpenAI API, `ember service stop`
(the worker saves its KV caches as it unloads), `ember service start`, and the next turn: its
usage says the old prefix came from the cache, restored from disk, and it answers. (That the
restored cells give the warm answer token for token is test_llamacpp_kv_store.py's, which can
hold the batch shapes equal.) Time to first token against a warm server is benchmarks/resume.py's
(docs/notes/kv-resume.md), not a test's."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.store import InstalledModel
from backends.llamacpp import engine as engine_module
from tests.support.live_server import free_port
from tests.support.supervised_service import (
    Service,
    ember,
    service_home,
    service_log,
    supervised_service,
)

SOURCE = Path(engine_module.__file__).read_text()
ANSWER_S = 300  # a cold load and a 2,000-token prompt on two busy cores


def chat(service: Service, model: str, messages: list[dict]) -> dict:
    r = httpx.post(f"{service.url}/v1/chat/completions", timeout=ANSWER_S,
                   headers={"Authorization": f"Bearer {service.key}"},
                   json={"model": model, "messages": messages, "max_tokens": 12,
                         "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()


def cached(body: dict) -> tuple[int, int]:
    details = body["usage"].get("prompt_tokens_details") or {}
    return details.get("cached_tokens", 0), details.get("disk_tokens", 0)


def test_the_next_turn_after_a_service_restart_comes_from_its_saved_cache(
        qwen: InstalledModel, tmp_path: Path) -> None:
    port = free_port()
    paths = service_home(tmp_path / "home", qwen, port)
    first = [{"role": "system", "content": "You review this Python module:\n" + SOURCE[:7000]},
             {"role": "user", "content": "In one sentence: what does `place` decide?"}]
    with supervised_service(paths, port, tmp_path / "user", EMBER_KV_CACHE_GB="1") as service:
        one = chat(service, qwen.ref, first)
        assert one["usage"]["prompt_tokens"] > 1500
        second = first + [{"role": "assistant", "content": one["choices"][0]["message"]["content"]},
                          {"role": "user", "content": "And `_swap`, in one sentence?"}]
        warm = chat(service, qwen.ref, second)  # the running service's answer
        assert cached(warm)[1] == 0

        stopped = ember(service.env, "service", "stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        saved = list(paths.kv_cache.glob("*.kv"))
        assert saved, f"no KV cache saved at the stop; service log: {service_log(paths)[-3000:]}"
        started = ember(service.env, "service", "start")
        assert started.returncode == 0, started.stdout + started.stderr + service_log(paths)

        again = chat(service, qwen.ref, second)
    cached_tokens, disk_tokens = cached(again)
    assert cached_tokens >= one["usage"]["prompt_tokens"], again["usage"]
    assert disk_tokens == cached_tokens, again["usage"]
    assert again["choices"][0]["message"]["content"].strip()
