"""The engine-agnostic half of speculative decoding (backends.speculation), without models:
prompt lookup's index, the cost model, one request's policy (switching off, trying again
after 8, 16, ... plain steps), and the draft-vocabulary check."""

from __future__ import annotations

import math

import pytest

from backends.base import SpeculativeParams
from backends.errors import InvalidRequestError
from backends.speculation.cost import (
    DraftCost,
    StepTimes,
    best_draft_length,
    expected_tokens,
)
from backends.speculation.ngram import NgramIndex
from backends.speculation.policy import Speculation
from backends.speculation.vocab import check_draft_vocabulary

ADAPTIVE_LOOKUP = SpeculativeParams(method="lookup")
DRAFT = SpeculativeParams(method="draft", draft_model="d")


def lookup(tokens: list[int], k: int) -> list[int]:
    return NgramIndex(tokens).propose(k)


def cpu_times() -> StepTimes:
    """Step times as on the 2-core CPU: extra rows cost, more so past 5."""
    times = StepTimes()
    for rows, seconds in ((1, 0.10), (3, 0.12), (5, 0.14), (9, 0.30)):
        times.record(rows, seconds)
    return times


def confident(params: SpeculativeParams = ADAPTIVE_LOOKUP, accepted: int = 4,
              remaining: int = 100) -> Speculation:
    """A request whose last 20 verifications of 4 proposals kept `accepted` each."""
    spec = Speculation(params, remaining=remaining)
    for _ in range(20):
        spec.observe(4, accepted)
    return spec


# -- prompt lookup -----------------------------------------------------------------------------
def test_ngram_lookup_proposes_what_followed_the_latest_match():
    index = NgramIndex([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8])
    index.extend([1, 2, 3])
    assert index.propose(3) == [7, 8, 1]  # the latest "1 2 3" was followed by 7 8 1
    index.extend([7])
    assert index.propose(10) == [8, 1, 2, 3, 7]  # up to the end of the text
    assert NgramIndex([5, 6]).propose(4) == []  # nothing to match
    assert NgramIndex([1, 2, 9, 1, 2]).propose(0) == []


def test_prompt_lookup_proposes_what_followed_the_latest_longest_match():
    assert lookup([1, 2, 3, 4, 2, 3, 5, 6, 7, 8, 2, 3], 3) == [5, 6, 7]  # latest "2 3"
    # the 3-gram "1 2 3" wins over the more recent 2-gram "2 3"
    assert lookup([1, 2, 3, 4, 9, 2, 3, 5, 6, 1, 2, 3], 3) == [4, 9, 2]
    assert lookup([1, 2, 3, 4, 1, 2, 3], 8) == [4, 1, 2, 3]
    assert lookup([1, 2, 3], 4) == []


def test_the_index_follows_a_text_that_grows_and_rebuilds_when_tokens_are_taken_back():
    index = NgramIndex([1, 2, 3, 4])
    index.follow([1, 2, 3, 4, 9, 1, 2, 3])  # accepted tokens appended
    assert index.propose(2) == [4, 9]
    index.follow([1, 2, 3, 4, 9, 1, 2, 7, 1, 2])  # the last tokens were replaced
    assert index.tokens == [1, 2, 3, 4, 9, 1, 2, 7, 1, 2]
    assert index.propose(2) == [7, 1]  # the latest "1 2", not the text taken back


# -- the cost model ----------------------------------------------------------------------------
def test_expected_tokens_is_the_geometric_sum():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert math.isclose(expected_tokens(0.5, 2), 1.75)


def test_step_times_are_measured_interpolated_or_extrapolated_with_the_prior_slope():
    assert StepTimes().cost(6) == pytest.approx(2.0)  # nothing measured: in one-row steps
    times = cpu_times()
    assert times.cost(4) == pytest.approx(0.13)  # interpolated
    assert times.cost(3) == pytest.approx(0.12)  # measured
    assert times.cost(11) == pytest.approx(0.30 / 2.6 * 3.0)  # 0.2 of a row per row past 9
    times.record(3, 0.22)  # a moving average: the newest counts a fifth
    assert times.cost(3) == pytest.approx(0.14)


def test_cost_model_speculates_only_where_it_is_faster():
    times = StepTimes()
    for rows, seconds in [(1, 1.0), (5, 1.6), (9, 2.2)]:  # 0.15 s per extra row
        times.record(rows, seconds)
    assert math.isclose(times.cost(3), 1.3, rel_tol=0.05)
    # prompt lookup costs only the extra rows: worth it at good acceptance, not at poor
    assert best_draft_length(0.8, 8, batch=1, rows=1, times=times, draft_step_s=0.0) >= 4
    assert best_draft_length(0.1, 8, batch=1, rows=1, times=times, draft_step_s=0.0) == 0
    # a draft model half as costly as a model step never pays at 50% acceptance
    assert best_draft_length(0.5, 8, batch=1, rows=1, times=times, draft_step_s=0.5) == 0
    # a measured size counts as measured: where 3 rows cost what 1 does, 2 proposals win
    steps = StepTimes()
    for rows, seconds in [(1, 1.0), (3, 1.0), (4, 2.0)]:
        steps.record(rows, seconds)
    assert best_draft_length(0.5, 8, batch=1, rows=1, times=steps, draft_step_s=0.0) == 2
    # in a batch of 8, extra rows delay every sequence: the bar is higher
    assert best_draft_length(0.5, 8, batch=8, rows=8, times=times, draft_step_s=0.0) < \
        best_draft_length(0.5, 8, batch=1, rows=1, times=times, draft_step_s=0.0)


# -- one request's policy ----------------------------------------------------------------------
def test_speculation_proposes_more_when_accepted_and_switches_off_when_not():
    times = cpu_times()
    assert confident(accepted=4).choose(8, times) >= 4
    bad = confident(accepted=0)
    assert [bad.choose(8, times) for _ in range(16)] == [0] * 16  # off
    # the same acceptance that a draft model's own steps eat pays off without one
    assert confident(accepted=2).choose(8, times) > 0
    assert confident(accepted=4).choose(0, times) == 0  # no room left (max_tokens or context)


def test_without_adaptation_every_step_proposes_max_draft_or_what_room_is_left():
    fixed = Speculation(SpeculativeParams(method="lookup", max_draft=4, adaptive=False))
    for _ in range(20):
        fixed.observe(4, 0)
    assert [fixed.choose(8, cpu_times()) for _ in range(3)] == [4, 4, 4]
    assert fixed.choose(2, cpu_times()) == 2


def test_a_draft_model_pays_only_at_higher_acceptance_and_probes_with_one_token_when_off():
    times = cpu_times()
    # a draft model costs its own steps: it needs a higher acceptance to pay off, and when
    # off it probes with one token every 8 steps, then 16 (lookup is checked for free instead)
    slow_draft = confident(DRAFT, accepted=2)
    cost = DraftCost(step_s=0.05, catch_up_token_s=0.01)
    chosen = [slow_draft.choose(8, times, draft=cost) for _ in range(40)]
    assert [i for i, k in enumerate(chosen) if k] == [7, 23]  # probes, ever further apart
    assert chosen[7] == chosen[23] == 1


def test_a_draft_waits_while_catching_up_on_a_long_prompt_costs_more_than_it_saves():
    keen = confident(DRAFT, accepted=4, remaining=20)
    times = cpu_times()
    assert keen.choose(8, times, draft=DraftCost(0.01, catch_up=10, catch_up_token_s=0.01)) > 0
    assert keen.choose(8, times,
                       draft=DraftCost(0.01, catch_up=1000, catch_up_token_s=0.01)) == 0


def test_speculation_switches_off_when_its_steps_give_less_than_the_model_promised():
    times = cpu_times()
    good = confident(accepted=4)
    assert good.choose(8, times) >= 4
    for _ in range(3):
        good.realize(2, 0.5)  # 2 tokens in 0.5 s, where a plain step takes 0.1 s
    assert good.realized_gain(0.1) == pytest.approx(0.4)
    assert good.choose(8, times) == 0


def test_switched_off_it_tries_again_after_8_plain_steps_then_16_then_8_once_a_try_pays():
    times = cpu_times()
    copier = confident(accepted=4)
    for _ in range(3):
        copier.realize(2, 0.5)  # the steps gave less than plain decoding: off
    # a few rejections where an edit departs from the copied text must not switch it off for
    # the rest of the answer: after 8 plain steps it tries again ...
    chosen = [copier.choose(8, times) for _ in range(9)]
    assert chosen[:8] == [0] * 8 and chosen[8] >= 4
    for _ in range(3):
        copier.realize(1, 0.5)  # ... that try falls short too: off for 16 steps
    chosen = [copier.choose(8, times) for _ in range(17)]
    assert chosen[:16] == [0] * 16 and chosen[16] >= 4
    for _ in range(3):
        copier.realize(8, 0.5)  # this try pays: the next stop looks again after 8 steps
    assert copier.choose(8, times) >= 4 and copier.retry_after == 8
    for _ in range(3):
        copier.realize(1, 0.5)
    chosen = [copier.choose(8, times) for _ in range(9)]
    assert chosen[:8] == [0] * 8 and chosen[8] >= 4


def test_prompt_lookup_checks_its_guess_against_each_plainly_decoded_token():
    times = cpu_times()
    spec = Speculation.start(ADAPTIVE_LOOKUP, [5, 6, 7, 8, 5, 6])
    for _ in range(20):
        spec.observe(4, 0)
    assert spec.choose(8, times) == 0 and spec.guess == 7  # off, but it guesses "7"
    before = spec.acceptance.rate
    spec.decoded_plainly(7)  # right: evidence that lookup would pay now
    assert spec.acceptance.rate > before and spec.guess is None
    spec.decoded_plainly(9)  # no guess pending: nothing counts
    assert spec.acceptance.rate > before


# -- the draft's vocabulary --------------------------------------------------------------------
def test_a_draft_must_give_every_token_the_models_text():
    vocab = ["a", "b", "c", "<eos>"]
    check_draft_vocabulary(vocab, list(vocab), "same", (0, 3), (0, 3))
    check_draft_vocabulary(vocab + ["<pad>"] * 100, vocab, "padded")  # unused padding ids
    with pytest.raises(InvalidRequestError, match=r"another tokenizer \(token 1 is 'c' there "
                                                  r"and 'b' here\).*does not share"):
        check_draft_vocabulary(vocab, ["a", "c", "b", "<eos>"], "swapped")
    with pytest.raises(InvalidRequestError, match="262144 tokens against the model's 151936"):
        check_draft_vocabulary(["x"] * 151936, ["x"] * 262144, "gemma")
    with pytest.raises(InvalidRequestError, match="special tokens"):
        check_draft_vocabulary(vocab, vocab, "base", (0, 3), (0, 2))
