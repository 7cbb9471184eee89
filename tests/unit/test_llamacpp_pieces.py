"""The llama.cpp engine's plan of prompt rows, without a model: which rows of which prompts
one step evaluates (backends/llamacpp/engine.py, `plan_prompt_rows`). That prompts planned
together decode right is checked on the real models in
tests/integration/test_llamacpp_prefix_cache.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from backends.llamacpp import engine


def slot_at(seq_id: int, prompt_len: int, pos: int) -> engine.Slot:
    job = engine.Job(f"s{seq_id}", None, None, list(range(prompt_len)), None, 8,
                     truncated=False, text=None)
    job.pos = pos
    return engine.Slot(seq_id, job=job)


def plan(slots: list[engine.Slot], room: int) -> list[tuple[int, int, int]]:
    return [(s.seq_id, start, end) for s, start, end in engine.plan_prompt_rows(slots, room)]


def test_a_step_fills_its_room_with_the_oldest_prompts_first():
    a, b, c = slot_at(0, 45, 0), slot_at(1, 20, 0), slot_at(2, 1000, 64)
    # a and b whole, then as much of c as fits
    assert plan([a, b, c], 512) == [(0, 0, 45), (1, 0, 20), (2, 64, 511)]
    # the oldest takes the room first: a long prompt leaves nothing for the next
    assert plan([c, a], 512) == [(2, 64, 576)]
    assert plan([a, b], 30) == [(0, 0, 30)]
    assert plan([a], 0) == []


def test_a_prompt_goes_on_from_where_its_cache_or_last_step_left_it():
    long = slot_at(0, 2000, 0)
    ends = []
    while long.job.pos < 2000:
        (_, start, end), = engine.plan_prompt_rows([long], 512)
        assert start == long.job.pos
        long.job.pos = end
        ends.append(end)
    assert ends == [512, 1024, 1536, 2000]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 2999)), min_size=1, max_size=8),
       st.integers(0, 512))
def test_every_plan_fills_its_room_in_order_without_gaps(prompts, room):
    slots = [slot_at(i, n, min(at, n - 1)) for i, (n, at) in enumerate(prompts)]
    pieces = engine.plan_prompt_rows(slots, room)
    used = sum(end - start for _, start, end in pieces)
    left = sum(len(s.job.prompt) - s.job.pos for s in slots)
    assert used == min(room, left)  # as full as the prompts allow
    assert [s.seq_id for s, _, _ in pieces] == [s.seq_id for s in slots][:len(pieces)]
    for slot, start, end in pieces:
        assert start == slot.job.pos < end <= len(slot.job.prompt)
    for slot, _, end in pieces[:-1]:  # only the last piece may stop short of its prompt
        assert end == len(slot.job.prompt)
