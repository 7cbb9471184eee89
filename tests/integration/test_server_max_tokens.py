"""`max_tokens` far above the context is a ceiling on the real model (issue 38): with the
0.5B loaded at a 512-token context (Ollama's num_ctx), an Anthropic request asking for
32,000 tokens, as Claude Code does, is answered until the context is full and stops with
`max_tokens`, its prompt whole and no reload; a prompt no context on this machine holds is
still a 400 naming the largest one. (Each dialect's own length reason is mapped in the
unit tests: tests/unit/test_server_agent_requests.py and the dialects' wire tests.)"""

from __future__ import annotations

import httpx

from tests.support.live_server import live_server

# the 0.5B writes this list far past a 512-token context (greedy, 600 tokens reach 137)
LIST = "Write a Python list literal containing the integers from 1 to 500."
CONTEXT = 512  # the fit model's smallest


def test_a_32k_ceiling_runs_to_the_contexts_end_with_the_length_reason(store, qwen):
    with live_server(store, parallel=1) as (url, runtime):
        r = httpx.post(url + "/api/generate", timeout=120,
                       json={"model": qwen.ref, "options": {"num_ctx": CONTEXT}})
        assert r.status_code == 200, r.text
        assert runtime.loaded()[0].plan.context == CONTEXT
        r = httpx.post(url + "/v1/messages", timeout=300, json={
            "model": qwen.ref, "max_tokens": 32000, "temperature": 0,
            "messages": [{"role": "user", "content": LIST}]})
        assert r.status_code == 200, r.text
        message = r.json()
        assert message["stop_reason"] == "max_tokens"
        used = message["usage"]
        assert used["input_tokens"] + used["output_tokens"] == CONTEXT
        assert runtime.loaded()[0].plan.context == CONTEXT  # no reload for the ceiling
        # a prompt larger than any context this machine gives the model: 400, never cut
        r = httpx.post(url + "/v1/messages", timeout=300, json={
            "model": qwen.ref, "max_tokens": 32000,
            "messages": [{"role": "user", "content": "word " * 40_000}]})
        assert r.status_code == 400, r.text
        assert "largest context this machine can give" in r.text, r.text
