"""Prompt lookup is every request's default (backends.base.DEFAULT_SPECULATION) on every
dialect; `"speculative": false` turns it off per request, `ember serve --no-speculation` for
the server, and the default gives way quietly where it cannot run (a remote model)."""

from __future__ import annotations

import pytest

from app.server.common_schemas import SpeculativeOptions
from app.server.generation_request import with_speculative
from backends.base import DEFAULT_SPECULATION, GenerationRequest, SpeculativeParams, TokenEvent
from tests.support.fake_runtime import MODEL, ScriptedRuntime, served

CHAT = [{"role": "user", "content": "hi"}]
# one request per dialect, with room for Ember's `speculative` field
BODIES = {
    "/v1/chat/completions": {"model": MODEL, "messages": CHAT},
    "/v1/completions": {"model": MODEL, "prompt": "hi"},
    "/v1/responses": {"model": MODEL, "input": "hi"},
    "/v1/messages": {"model": MODEL, "max_tokens": 8, "messages": CHAT},
    "/api/chat": {"model": MODEL, "messages": CHAT, "stream": False},
    "/api/generate": {"model": MODEL, "prompt": "hi", "stream": False},
}


def test_the_field_maps_to_the_default_off_lookup_or_what_it_says():
    plain = GenerationRequest(prompt="hi")
    assert with_speculative(plain, None).speculative == DEFAULT_SPECULATION
    assert with_speculative(plain, False).speculative is None
    assert with_speculative(plain, True).speculative == SpeculativeParams(method="lookup")
    asked = with_speculative(plain, SpeculativeOptions(method="lookup", max_draft=4))
    assert asked.speculative == SpeculativeParams(method="lookup", max_draft=4)
    assert not asked.speculative.by_default  # asked for: an error where it cannot run


@pytest.mark.parametrize("path", BODIES)
def test_every_dialect_speculates_by_default_and_false_turns_it_off(path):
    fake = ScriptedRuntime(script=[TokenEvent("hello")])
    with served(fake) as client:
        for body in ({}, {"speculative": False}, {"speculative": {"method": "lookup"}}):
            r = client.post(path, json={**BODIES[path], **body})
            assert r.status_code == 200, r.text
    assert [r.speculative for r in fake.requests] == [
        DEFAULT_SPECULATION, None, SpeculativeParams(method="lookup")]


def test_a_server_started_with_no_speculation_keeps_only_what_requests_ask_for():
    fake = ScriptedRuntime(script=[TokenEvent("hello")])
    with served(fake, speculation=False) as client:
        for body in ({}, {"speculative": True}):
            r = client.post("/v1/chat/completions", json={**BODIES["/v1/chat/completions"],
                                                          **body})
            assert r.status_code == 200, r.text
    assert [r.speculative for r in fake.requests] == [None, SpeculativeParams(method="lookup")]
