"""The llama.cpp engine's slot table, without a model: which free slot a new request takes
and how much of its cache it reuses (backends/llamacpp/engine.py, `reusable` and `place`).
That the reused cells serve the next turn right, and that a shared system prompt keeps the
other conversation's cache, is checked on the real models in
tests/integration/test_llamacpp_prefix_cache.py."""

from __future__ import annotations

from types import SimpleNamespace

from backends.llamacpp.engine import (
    SHARE_IN_FLIGHT_MIN,
    Placement,
    Slot,
    covered_slots,
    in_flight_prefix,
    place,
    reusable,
    runs,
    shelter,
    wanted_slots,
)

SYSTEM = list(range(1000, 1040))  # a 40-token system prompt


def cached(seq_id: int, tokens: list[int], last_used: float = 0.0) -> Slot:
    """A free slot whose cache holds `tokens`."""
    return Slot(seq_id, tokens=list(tokens), last_used=last_used)


def test_reuse_is_the_whole_common_prefix():
    slot = cached(0, list(range(100)))
    assert reusable(slot, list(range(70)) + [7, 7]) == 70
    assert reusable(slot, list(range(15)) + [7]) == 15
    assert reusable(slot, list(range(100)) + [7] * 30) == 100  # the next turn: all of it
    assert reusable(slot, [7] + list(range(1, 100))) == 0  # a different first token


def test_reuse_stops_short_of_the_prompts_last_token():
    slot = cached(0, list(range(100)))
    # the last token must be evaluated for the logits its answer starts from
    assert reusable(slot, list(range(64))) == 63
    assert reusable(slot, [0]) == 0


def test_the_same_prompt_again_reuses_all_of_it_from_the_stored_logits():
    prompt = list(range(50))
    slot = cached(0, prompt + [500, 501])  # its prompt, then its answer
    slot.logits_at = len(prompt)  # the logits after the prompt were kept
    assert reusable(slot, prompt) == 50
    assert reusable(slot, prompt[:40]) == 39  # another prompt: the usual rule


def test_a_new_request_takes_the_slot_with_the_longest_common_prefix():
    ours = SYSTEM + list(range(88))
    slots = [cached(0, list(range(500, 600)), last_used=1.0),
             cached(1, ours, last_used=3.0),
             cached(2, SYSTEM, last_used=2.0)]
    assert place(slots, ours + [9] * 20) == Placement(slots[1], 128)


def test_a_new_conversation_sharing_the_system_prompt_takes_the_lru_slot_with_shared_cells():
    busy = cached(0, SYSTEM + list(range(100)), last_used=5.0)  # a conversation's cache
    idle = cached(1, list(range(500, 520)), last_used=1.0)
    other = cached(2, list(range(600, 630)), last_used=3.0)
    new = SYSTEM + [7] * 30
    # the cells of the 40 shared tokens go to the least recently used free slot, and the
    # conversation keeps its 140 for its next turn
    assert place([busy, idle, other], new) == Placement(idle, 40, donor=busy)
    # a sliding-window cache cannot share cells: the conversation's cache is cut instead
    assert place([busy, idle, other], new, can_share=False) == Placement(busy, 40)
    # when the conversation's own slot is the least recently used, it is cut as well
    busy.last_used = 0.5
    assert place([busy, idle, other], new) == Placement(busy, 40)


def test_without_reuse_the_least_recently_used_cache_is_evicted_first():
    slots = [cached(0, [1] * 20, last_used=3.0), cached(1, [2] * 20, last_used=1.0),
             cached(2, [3] * 20, last_used=2.0)]
    order = []
    free = list(slots)
    while free:  # each new, unrelated request takes (and cuts) the cache idle longest
        chosen = place(free, [9] * 30)
        assert chosen.keep == 0 and chosen.donor is None
        order.append(chosen.slot.seq_id)
        free.remove(chosen.slot)
    assert order == [1, 2, 0]
    # among slots that serve the same prefix, too, the least recently used goes first
    a = cached(0, SYSTEM + [1] * 9, last_used=2.0)
    b = cached(1, SYSTEM + [2] * 9, last_used=1.0)
    assert place([a, b], SYSTEM + [3]) == Placement(b, 40)


def test_a_cache_key_overwrites_its_own_clients_caches_before_anothers():
    """Two agents share a machine: a request with a cache key (prompt_cache_key) that reuses
    nothing, or copies a shared prefix, overwrites its own key's cache before the other
    agent's, however recently each was used."""
    theirs = cached(0, [1] * 20, last_used=1.0)
    theirs.cache_key = "agent-b"
    ours = cached(1, [2] * 20, last_used=3.0)
    ours.cache_key = "agent-a"
    assert place([theirs, ours], [9] * 30, cache_key="agent-a") == Placement(ours, 0)
    assert place([theirs, ours], [9] * 30) == Placement(theirs, 0)  # no key: the LRU one
    # the copy of a shared system prompt goes into its own key's slot as well
    conversation = cached(2, SYSTEM + list(range(100)), last_used=5.0)
    new = SYSTEM + [7] * 30
    assert place([conversation, theirs, ours], new, cache_key="agent-a") == Placement(
        ours, 40, donor=conversation)
    assert place([conversation, theirs, ours], new) == Placement(
        theirs, 40, donor=conversation)


def test_a_conversations_next_turn_stays_in_its_slot_and_evicts_no_other():
    prompt = SYSTEM + list(range(60))  # 100 tokens
    ours = cached(1, prompt + [500] * 12, last_used=2.0)  # and its answer
    ours.logits_at = len(prompt)
    theirs = cached(0, list(range(700, 800)), last_used=1.0)  # another conversation
    next_turn = prompt + [500] * 12 + [9] * 8
    # everything cached, the answer too: only the 8 new tokens are evaluated
    assert place([theirs, ours], next_turn) == Placement(ours, 112)


def test_runs_count_the_passes_a_decode_step_takes():
    assert runs(set()) == 0
    assert runs({1, 2, 3, 4}) == 1
    assert runs({1, 3, 5, 7}) == 4
    assert runs({0, 1, 5, 6, 7}) == 2


def test_while_others_decode_a_request_takes_the_slot_that_keeps_their_ids_consecutive():
    # sequences 1 and 3 decode; slots 0, 2, 4-7 are free
    free = [cached(i, [100 + i] * 20, last_used=float(i)) for i in (0, 2, 4, 5, 6, 7)]
    busy = frozenset({1, 3})
    # an unrelated prompt: slot 0 is the least recently used, but slot 2 joins 1 and 3
    assert place(free, [9] * 30, busy=busy) == Placement(free[1], 0)
    # a conversation cached in slot 6 moves to slot 2 with a copy of its cells; slot 6
    # keeps its cache
    ours = cached(6, SYSTEM + [5] * 50, last_used=0.5)
    free = [free[0], free[1], free[2], free[3], ours, free[5]]
    assert place(free, ours.tokens + [7] * 9, busy=busy) == Placement(free[1], 90, donor=ours,
                                                                      moved=True)
    # nothing decoding: it stays where its cache is
    assert place(free, ours.tokens + [7] * 9) == Placement(ours, 90)
    # a sliding-window cache cannot be copied: it stays, and only an empty slot moves
    assert place(free, ours.tokens + [7] * 9, can_share=False, busy=busy) == Placement(ours, 90)
    assert place(free, [9] * 30, can_share=False, busy=busy) == Placement(free[1], 0)


def test_a_short_tail_past_the_shared_prefix_is_not_worth_a_copy():
    # the same long document again with another question: the slot's cells after the
    # document are only the first question and a short answer, so the slot is cut in place
    # rather than its whole KV stream copied
    document = list(range(2000))
    slot = cached(0, document + [7] * 20, last_used=2.0)
    idle = cached(1, [5] * 10, last_used=1.0)
    assert place([slot, idle], document + [8] * 12) == Placement(slot, 2000)
    long_tail = cached(0, document + [7] * 64, last_used=2.0)
    assert place([long_tail, idle], document + [8] * 12) == Placement(idle, 2000,
                                                                      donor=long_tail)


def test_a_burst_of_returning_conversations_each_keeps_its_own_cache():
    # eight conversations cached in eight slots come back together: the first runs in
    # slot 3, and the others, waiting, must each find their cache where it was; moving one
    # next to slot 3 would overwrite a cache another of them is about to reuse
    prompts = [SYSTEM + [100 + i] * 10 for i in range(8)]
    slots = [cached(i, prompts[i] + [7] * 5, last_used=float(i)) for i in range(8)]
    for slot, prompt in zip(slots, prompts, strict=True):
        slot.logits_at = len(prompt)
    running = slots[3]
    free = [s for s in slots if s is not running]
    waiting = [prompts[i] for i in (0, 1, 2, 4, 5, 6, 7)]
    for prompt in list(waiting):
        waiting.remove(prompt)
        wanted = wanted_slots(free, waiting)
        chosen = place(free, prompt, busy=frozenset({running.seq_id}), wanted=wanted)
        assert chosen.donor is None and chosen.keep == len(prompt)
        assert chosen.slot.tokens[:len(prompt)] == prompt
        free.remove(chosen.slot)
    # without the waiting requests' caches to keep, the first one would move next to slot 3
    first = place([s for s in slots if s is not running], prompts[0],
                  busy=frozenset({running.seq_id}))
    assert first.donor is slots[0] and first.slot.seq_id in (2, 4)


def test_wanted_slots_are_each_waiting_prompts_best_cache():
    a, b, c = cached(0, SYSTEM + [1] * 9), cached(1, [2] * 30), cached(2, [3] * 30)
    assert wanted_slots([a, b, c], [SYSTEM + [1] * 9 + [5], [2] * 12]) == {0, 1}
    assert wanted_slots([a, b, c], [[9] * 20]) == frozenset()  # reuses nothing


def test_a_move_next_to_the_running_ones_overwrites_a_copy_before_a_conversation():
    # sequences 1 and 2 decode; slots 0 and 3 both join them. Slot 0 holds an old copy of
    # the conversation now running in slot 1, slot 3 the only cache of another one: the
    # new request moves into slot 0 though slot 3 was used longer ago
    running = cached(1, SYSTEM + [5] * 30)
    other = cached(2, [8] * 30)
    copy = cached(0, SYSTEM + [5] * 20, last_used=2.0)
    unique = cached(3, [6] * 30, last_used=1.0)
    moving = cached(5, [7] * 30, last_used=0.5)
    free = [copy, unique, moving]
    covered = covered_slots(free, [copy, running, other, unique, moving])
    assert covered == {0}
    busy = frozenset({1, 2})
    assert place(free, [7] * 30 + [1], busy=busy, covered=covered) == Placement(
        copy, 30, donor=moving, moved=True)
    # without knowing which cache is a copy, the least recently used goes
    assert place(free, [7] * 30 + [1], busy=busy) == Placement(unique, 30, donor=moving,
                                                               moved=True)
    assert covered_slots([cached(5, [])], [running]) == {5}  # an empty slot loses nothing


def test_a_prompt_that_reuses_nothing_overwrites_a_copy_before_a_conversation():
    copy = cached(0, SYSTEM + [5] * 20, last_used=3.0)  # an old copy of slot 1's cache
    running = cached(1, SYSTEM + [5] * 30)
    unique = cached(2, [6] * 30, last_used=1.0)
    free = [copy, unique]
    covered = covered_slots(free, [copy, running, unique])
    assert place(free, [9] * 12, covered=covered) == Placement(copy, 0)
    assert place(free, [9] * 12) == Placement(unique, 0)  # not knowing: the LRU one
    # nor one that a waiting request reuses, even if it is the least recently used
    assert place(free, [9] * 12, wanted=frozenset({2})) == Placement(copy, 0)


def test_a_move_that_must_overwrite_a_conversation_shelters_it_in_a_copy_first():
    # 4 and 5 decode; the conversation in slot 1 returns and moves next to them, into
    # slot 3, the only cache of another conversation: that cache goes first to slot 0,
    # which holds an old copy of slot 4's, and not to slot 2 (another conversation's)
    old_copy = cached(0, [7] * 20, last_used=1.0)
    returning = cached(1, [8] * 30, last_used=2.0)
    other = cached(2, [9] * 30, last_used=0.5)
    victim = cached(3, [6] * 30, last_used=3.0)
    running = [cached(4, [7] * 40), cached(5, [5] * 10)]
    free = [old_copy, returning, other, victim]
    covered = covered_slots(free, free + running)
    assert covered == {0}
    placement = place(free, [8] * 30 + [1], busy=frozenset({4, 5}), covered=covered)
    assert placement == Placement(victim, 30, donor=returning, moved=True)
    assert shelter(free, placement, covered) is old_copy
    assert shelter(free, placement, covered, wanted=frozenset({0})) is None
    empty = cached(6, [])
    assert shelter(free + [empty], placement, covered | {6}) is empty  # empty ones first
    # nothing to shelter: no donor, an empty target, or a target that is itself a copy
    assert shelter(free, Placement(victim, 0), covered) is None
    assert shelter(free, Placement(old_copy, 20, donor=returning), covered) is None


def running(seq_id: int, prompt: list[int], evaluated: int) -> Slot:
    """A slot whose request's prompt has been evaluated up to `evaluated` tokens."""
    return Slot(seq_id, tokens=prompt[:evaluated], job=SimpleNamespace(prompt=prompt))


def test_a_prompt_waits_for_a_long_prefix_being_evaluated_and_not_for_a_short_one():
    agent = list(range(2000))  # an agent's system prompt and tools
    first = running(0, agent + [1, 2, 3], evaluated=500)
    other = running(1, [9] * 50, evaluated=50)
    mine = agent + [4, 5]
    assert in_flight_prefix([other, first], mine, reuse=0) == (first, 2000)
    # a free slot's cache serves most of it already: no wait
    assert in_flight_prefix([first], mine, reuse=2000 - SHARE_IN_FLIGHT_MIN + 1) == (None, 0)
    # a short common prefix (a chat template's header) is not worth waiting for
    assert in_flight_prefix([first], agent[:SHARE_IN_FLIGHT_MIN - 1] + [7] * 900,
                            reuse=0) == (None, 0)
    # the same prompt: all but its last token, whose logits the request needs
    assert in_flight_prefix([first], agent + [1, 2, 3], reuse=0) == (first, 2002)
