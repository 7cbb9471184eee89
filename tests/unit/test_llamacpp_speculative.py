"""The llama.cpp backend's speculation parts alone: n-gram lookup, and the cost model that
picks the draft length or switches speculation off."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from backends.base import SpeculativeParams
from backends.llamacpp.speculative import NgramLookup, Speculation, StepTimes

ADAPTIVE_LOOKUP = SpeculativeParams(method="lookup")


# -- the parts ---------------------------------------------------------------------------------
def test_ngram_lookup_proposes_what_followed_the_latest_match():
    lookup = NgramLookup([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8])
    lookup.extend([1, 2, 3])
    assert lookup.propose(3) == [7, 8, 1]  # the latest "1 2 3" was followed by 7 8 1
    lookup.extend([7])
    assert lookup.propose(10) == [8, 1, 2, 3, 7]  # up to the end of the text
    assert NgramLookup([5, 6]).propose(4) == []  # nothing to match
    assert NgramLookup([1, 2, 9, 1, 2]).propose(0) == []


def test_speculation_proposes_more_when_accepted_and_switches_off_when_not():
    times = StepTimes()
    for rows, seconds in ((1, 0.10), (3, 0.12), (5, 0.14), (9, 0.30)):
        times.record(rows, seconds)
    assert times.cost(4) == pytest.approx(0.13)  # interpolated
    good = Speculation(ADAPTIVE_LOOKUP, remaining=100)
    for _ in range(20):
        good.observe(4, 4)
    assert good.choose(8, 1, times) >= 4
    bad = Speculation(ADAPTIVE_LOOKUP, remaining=100)
    for _ in range(20):
        bad.observe(4, 0)
    assert [bad.choose(8, 1, times) for _ in range(16)] == [0] * 16  # off
    # a draft model costs its own steps: it needs a higher acceptance to pay off, and when
    # off it probes with one token every 8 steps (lookup is checked for free instead)
    draft_params = SpeculativeParams(method="draft", draft_model="d")
    slow_draft = Speculation(draft_params, draft=SimpleNamespace(round_s=0.05, prefill_s=0.01),
                             remaining=100)
    for _ in range(20):
        slow_draft.observe(4, 2)
    chosen = [slow_draft.choose(8, 1, times) for _ in range(40)]
    assert [i for i, k in enumerate(chosen) if k] == [7, 23]  # probes, ever further apart
    # a good draft still waits when catching up on a long prompt costs more than it saves
    keen = Speculation(draft_params, draft=SimpleNamespace(round_s=0.01, prefill_s=0.01),
                       remaining=20)
    for _ in range(20):
        keen.observe(4, 4)
    assert keen.choose(8, 1, times, catch_up=10) > 0
    assert keen.choose(8, 1, times, catch_up=1000) == 0
    free_lookup = Speculation(ADAPTIVE_LOOKUP, remaining=100)
    for _ in range(20):
        free_lookup.observe(4, 2)
    assert free_lookup.choose(8, 1, times) > 0  # the same acceptance pays off without a draft
    assert good.choose(0, 1, times) == 0  # no room left (max_tokens or context)
    # the promise is checked against what speculative steps really gave
    for _ in range(3):
        good.realize(2, 0.5)  # 2 tokens in 0.5 s, where a plain step takes 0.1 s
    assert good.realized_gain(0.1) == pytest.approx(0.4)
    assert good.choose(8, 1, times) == 0
    # ... but not for the rest of the answer (a few rejections where an edit departs from
    # the copied text): after 8 plain steps it tries again, then after 16 if the new try
    # falls short too
    copier = Speculation(ADAPTIVE_LOOKUP, remaining=100)
    for _ in range(20):
        copier.observe(4, 4)
    for _ in range(3):
        copier.realize(2, 0.5)
    chosen = [copier.choose(8, 1, times) for _ in range(9)]
    assert chosen[:8] == [0] * 8 and chosen[8] >= 4
    for _ in range(3):
        copier.realize(1, 0.5)
    chosen = [copier.choose(8, 1, times) for _ in range(17)]
    assert chosen[:16] == [0] * 16 and chosen[16] >= 4
    for _ in range(3):
        copier.realize(8, 0.5)  # this try pays: the next stop looks again after 8 steps
    assert copier.choose(8, 1, times) >= 4 and copier.probe_every == 8
