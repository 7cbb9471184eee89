"""Speculative decoding in the llama.cpp backend: the real Qwen2.5-Coder pair (1.5B target,
0.5B draft) and prompt lookup, through the Runtime's worker. The engine-agnostic parts
(lookup, cost model, switching off and retrying) are tested alone in
tests/unit/test_speculation.py."""

from __future__ import annotations

import threading

import pytest

from app.runtime import Runtime
from backends.base import (
    DEFAULT_SPECULATION,
    GenerationRequest,
    LoadPlan,
    Message,
    SamplingParams,
    SpeculativeParams,
)
from backends.errors import InvalidRequestError
from backends.llamacpp.backend import LlamaCppBackend
from tests.support import REPO
from tests.support.agreement import forced_through

SOURCE = (REPO / "backends" / "text.py").read_text()[:1400]
EDIT = (f"Rename the function held_back to trailing_stop_prefix in this code and output the "
        f"whole code, nothing else:\n```python\n{SOURCE}\n```")
# A fixed draft length: these tests check verification, which the adaptive cost model may
# leave idle when the machine is busy (in CI it once proposed 6 tokens in a 64-token answer).
# test_speculation.py covers adapting.
LOOKUP = SpeculativeParams(method="lookup", max_draft=4, adaptive=False)


def edit_request(sampling: SamplingParams, speculative: SpeculativeParams | None = None,
                 text: str = EDIT) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),), sampling=sampling,
                             speculative=speculative)


def test_greedy_output_is_identical_with_a_draft_model_and_with_prompt_lookup(store, qwen,
                                                                             qwen15):
    greedy = SamplingParams(temperature=0, max_tokens=64)
    # on this CPU the cost model rightly keeps the draft off (benchmarks/speculative.py):
    # a fixed draft length makes it propose, to test its verification
    draft = SpeculativeParams(method="draft", draft_model=qwen.ref, max_draft=4,
                              adaptive=False)
    with Runtime(store=store) as rt:
        plain, plain_stats = rt.generate(qwen15.ref, edit_request(greedy)).result()
        looked, lookup_stats = rt.generate(qwen15.ref, edit_request(greedy, LOOKUP)).result()
        drafted, draft_stats = rt.generate(qwen15.ref, edit_request(greedy, draft)).result()
    assert plain_stats.completion_tokens == 64 and plain_stats.draft_tokens == 0
    assert looked == plain
    assert drafted == plain
    # the answer copies the code: most proposals are right
    assert lookup_stats.accepted_tokens > 20
    assert 0 < lookup_stats.accepted_tokens <= lookup_stats.draft_tokens
    assert draft_stats.accepted_tokens > 20
    assert 0 < draft_stats.accepted_tokens <= draft_stats.draft_tokens
    assert lookup_stats.completion_tokens == draft_stats.completion_tokens == 64


def test_seeded_sampling_gives_the_same_answer_with_and_without_speculation(store, qwen):
    # the sampler draws once per emitted token either way, so a seed fixes the answer
    sampled = SamplingParams(temperature=0.9, top_p=0.95, seed=1234, max_tokens=48)
    with Runtime(store=store) as rt:
        plain, _ = rt.generate(qwen.ref, edit_request(sampled)).result()
        looked, stats = rt.generate(qwen.ref, edit_request(sampled, LOOKUP)).result()
        # the seed matters, so the equality below means something: an answer that copies
        # code is nearly certain at most tokens, so one other seed may well agree; of three
        # (each 48 tokens), one differs
        others = [rt.generate(qwen.ref, edit_request(SamplingParams(
            temperature=0.9, top_p=0.95, seed=seed, max_tokens=48))).result()[0]
            for seed in (99, 7, 2024)]
    assert looked == plain
    assert stats.accepted_tokens > 0
    assert any(other != plain for other in others)


def test_speculating_streams_decoded_together_match_their_solo_runs(store, qwen):
    greedy = SamplingParams(temperature=0, max_tokens=40)
    asks = [edit_request(greedy, LOOKUP),
            edit_request(greedy, LOOKUP, EDIT.replace("held_back", "find_stop", 1)
                         .replace("trailing_stop_prefix", "first_stop")),
            edit_request(greedy)]
    with Runtime(store=store, parallel=3) as rt:
        solo = [rt.generate(qwen.ref, r).result()[0] for r in asks]
        results: list = [None] * len(asks)

        def run(i: int) -> None:
            results[i] = rt.generate(qwen.ref, asks[i]).result()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(asks))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
    assert [text for text, _ in results] == solo
    assert results[0][1].accepted_tokens > 0 and results[2][1].draft_tokens == 0


def test_stop_strings_and_max_tokens_end_a_speculative_answer_where_a_plain_one_ends(store,
                                                                                    qwen):
    with Runtime(store=store) as rt:
        for sampling in (SamplingParams(temperature=0, max_tokens=17),
                         SamplingParams(temperature=0, max_tokens=200, stop=("def ",))):
            plain, p = rt.generate(qwen.ref, edit_request(sampling)).result()
            looked, s = rt.generate(qwen.ref, edit_request(sampling, LOOKUP)).result()
            assert (looked, s.completion_tokens, s.finish_reason) == (
                plain, p.completion_tokens, p.finish_reason)
        # the cache holds only accepted tokens: a follow-up reuses it and still matches
        greedy = SamplingParams(temperature=0, max_tokens=24)
        first, _ = rt.generate(qwen.ref, edit_request(greedy, LOOKUP)).result()
        turn2 = (Message("user", EDIT), Message("assistant", first), Message("user", "Thanks!"))
        cached, stats = rt.generate(qwen.ref, GenerationRequest(
            messages=turn2, sampling=greedy, speculative=LOOKUP)).result()
        assert stats.cached_tokens > 0
    # A fresh context evaluates the same conversation in other batch shapes, so its greedy
    # answer may part from the cached one at a near-tie (on an AVX2-only CPU it did, at the
    # sixth word: issue 36): every token of the cached answer is a fresh context's top choice
    # or within the tolerance of it (tests/support/agreement.py).
    fresh = LlamaCppBackend()
    fresh.load(qwen, LoadPlan(context=2048, threads=2))
    try:
        prompt, _, _ = fresh.prompt_tokens(GenerationRequest(messages=turn2, sampling=greedy))
        forced_through(fresh, prompt + fresh.tokenize(cached), len(prompt)).check()
    finally:
        fresh.unload()


def test_a_draft_model_with_another_tokenizer_or_none_is_a_clear_error(store, qwen, gemma,
                                                                       qwen15):
    greedy = SamplingParams(temperature=0, max_tokens=8)
    with Runtime(store=store) as rt:
        # drafts are bounded: smaller than their model (and counted in the memory budget)
        with pytest.raises(InvalidRequestError, match="is not smaller than"):
            rt.generate(qwen.ref, edit_request(greedy, SpeculativeParams(
                method="draft", draft_model=qwen15.ref))).result()
        with pytest.raises(InvalidRequestError, match="does not share the model's tokenizer"):
            rt.generate(qwen.ref, edit_request(greedy, SpeculativeParams(
                method="draft", draft_model=gemma.ref))).result()
        with pytest.raises(InvalidRequestError, match="cannot be its own draft model"):
            rt.generate(qwen.ref, edit_request(greedy, SpeculativeParams(
                method="draft", draft_model=qwen.ref))).result()
        with pytest.raises(InvalidRequestError, match="sliding-window"):
            rt.generate(gemma.ref, GenerationRequest(prompt="def add(a, b):", sampling=greedy,
                                                     speculative=LOOKUP)).result()
        # Ember's default gives way there: the request decodes plainly
        text, stats = rt.generate(gemma.ref, GenerationRequest(
            prompt="def add(a, b):", sampling=greedy, speculative=DEFAULT_SPECULATION)).result()
        assert text and stats.draft_tokens == 0
        # the worker keeps serving after refusing
        text, _ = rt.generate(qwen.ref, edit_request(greedy)).result()
        assert text
        # the drafts it was asked for count in the memory budget
        worker = rt._workers[qwen.ref]
        assert worker.memory_bytes == worker.plan.memory_bytes + gemma.size_bytes
    with pytest.raises(InvalidRequestError, match="needs a draft_model"):
        SpeculativeParams(method="draft").validate()
    with pytest.raises(InvalidRequestError, match="max_draft"):
        SpeculativeParams(method="lookup", max_draft=0).validate()


def test_a_near_tie_is_sampled_again_from_a_one_row_step(qwen, monkeypatch):
    """A verification batch rounds each row differently from the one-row step of plain
    decoding, so a greedy near-tie can go the other way (backends/llamacpp/engine.py,
    NEAR_TIE). With every position counted as a near-tie, each step keeps only what a
    one-row step decides, and the answer is plain decoding's to the bit."""
    from backends.base import DoneEvent, LoadPlan
    from backends.llamacpp import engine
    from backends.llamacpp.backend import LlamaCppBackend

    rechecks = []
    recheck = engine.BatchEngine._recheck

    def counting(self, r):
        rechecks.append(r)
        return recheck(self, r)

    monkeypatch.setattr(engine.BatchEngine, "_recheck", counting)
    backend = LlamaCppBackend()
    backend.load(qwen, LoadPlan(context=2048, threads=2, parallel=1))

    def answer(speculative: SpeculativeParams | None) -> tuple[str, object]:
        backend.submit("s", edit_request(SamplingParams(temperature=0, max_tokens=48),
                                         speculative))
        done = None
        while backend.has_work():
            done = next((e for _, e in backend.step() if isinstance(e, DoneEvent)), done)
        return done.text, done.stats

    try:
        plain, _ = answer(None)
        monkeypatch.setattr(engine, "NEAR_TIE", float("inf"))
        looked, stats = answer(LOOKUP)
        assert looked == plain
        assert stats.draft_tokens > 0 and len(rechecks) > 10
        # each re-check took the pending token's row alone: the proposal after it waited
        assert all(r.index == 0 for r in rechecks)
        monkeypatch.setattr(engine, "NEAR_TIE", 0.0)
        rechecks.clear()
        looked, stats = answer(LOOKUP)
        assert rechecks == [] and stats.accepted_tokens > 10
    finally:
        backend.unload()
