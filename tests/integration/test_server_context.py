"""An agent's long prompt through the server: a model loaded at the default 4096 context
reloads with the largest context the fit model gives it, and a prompt longer than that is a
400 naming the limit, before any stream starts. Never a silently cut prompt."""

from __future__ import annotations

import httpx
import pytest

from app.fit import plan_for
from app.fit.base import DEFAULT_CONTEXT
from app.runtime.runtime import LARGEST_CONTEXT
from tests.support.live_server import live_server
from tests.support.machines import GiB, profile

# 2 cores and 0.75 GB of available RAM: the fit model gives Qwen2.5-Coder-0.5B Q4_K_M its
# default 4096 context with an f16 KV cache, and at most 8192 with a q8_0 one (f16: 4096).
SMALL_MACHINE = profile(4 * GiB, 0.75e9, 2, 20)


def module_prompt(functions: int) -> str:
    """An agent-style prompt: a module of `functions` small functions (about 18 tokens each
    in Qwen's tokenizer), then a question."""
    code = "\n".join(f"def handler_{i}(request):\n    return respond(request, {200 + i})"
                     for i in range(functions))
    return f"Here is my module:\n{code}\nWhich handler returns 203? Answer with its name."


def test_the_small_machine_plans_8k_with_q8_0_at_most(qwen):
    default = plan_for(qwen, "llamacpp", SMALL_MACHINE, None, 1)
    largest = plan_for(qwen, "llamacpp", SMALL_MACHINE, LARGEST_CONTEXT, 1)
    assert (default.context, default.kv_cache) == (DEFAULT_CONTEXT, "f16")
    assert (largest.context, largest.kv_cache) == (8192, "q8_0")
    assert "KV cache q8_0: 8k context fits in 0.05 GB instead of 0.10 GB (f16 would fit 4k)" \
        in largest.reason


def test_a_prompt_past_the_loaded_context_reloads_at_the_largest_and_is_answered_whole(
        store, qwen):
    """Loaded with a 1k context (as a user may have), a 1.6k-token prompt reloads the model
    with the largest context the machine gives it, 8k with a q8_0 KV cache, not just enough,
    and the answer reads the whole prompt. (A prompt past the default 4k context takes the
    same path; its 6k-token prefill was 4 minutes of the suite on 2 cores.)"""
    with live_server(store, hardware=SMALL_MACHINE, parallel=1) as (url, runtime):
        runtime.load(qwen.ref, context=1024)
        assert runtime.loaded()[0].plan.context == 1024
        r = httpx.post(url + "/v1/chat/completions", timeout=600, json={
            "model": qwen.ref, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": module_prompt(90)}]})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] > 1024 + 500
        assert "handler_3" in r.json()["choices"][0]["message"]["content"]
        plan = runtime.loaded()[0].plan
        assert (plan.context, plan.kv_cache) == (8192, "q8_0")


@pytest.mark.parametrize("path, stream", [("/v1/chat/completions", False),
                                          ("/v1/chat/completions", True),
                                          ("/api/chat", True), ("/api/chat", False)])
def test_a_prompt_longer_than_memory_allows_is_a_400_naming_the_limit(store, qwen, path,
                                                                      stream):
    body = {"model": qwen.ref, "stream": stream,
            "messages": [{"role": "user", "content": module_prompt(600)}]}
    with live_server(store, hardware=SMALL_MACHINE, parallel=1) as (url, runtime):
        r = httpx.post(url + path, timeout=120, json=body | (
            {"max_tokens": 16} if path.startswith("/v1") else {"options": {"num_predict": 16}}))
        assert r.status_code == 400, r.text
        message = r.json()["error"]
        message = message["message"] if isinstance(message, dict) else message
        assert "with room for the answer (16 tokens) it needs a context of" in message
        assert f"the largest context this machine can give {qwen.ref}" in message
        assert "is 8192 tokens: shorten the prompt" in message
        prompt_tokens = int(message.split("the prompt is ")[1].split(" tokens")[0])
        assert prompt_tokens > 8192
        assert runtime.loaded()[0].plan.context == DEFAULT_CONTEXT  # not reloaded for nothing


def test_ollamas_num_ctx_too_small_for_the_prompt_is_a_400_not_a_cut_prompt(store, qwen):
    with live_server(store, parallel=1) as (url, _):
        r = httpx.post(url + "/api/chat", timeout=120, json={
            "model": qwen.ref, "stream": False, "options": {"num_ctx": 2048},
            "messages": [{"role": "user", "content": module_prompt(200)}]})
        assert r.status_code == 400, r.text
        assert "the context asked for" in r.json()["error"]
        assert "is 2048 tokens" in r.json()["error"]
