"""The llama.cpp engine's plan of prompt pieces, without a model: which rows of which prompts
one step evaluates (backends/llamacpp/engine.py explains why pieces end at fixed positions
and take fixed rows of a batch). That the plan keeps a cached prefix bit-exact is checked on
the real models in tests/integration/test_llamacpp_prefix_cache.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from backends.llamacpp import engine


def slot_at(seq_id: int, prompt_len: int, pos: int) -> engine.Slot:
    job = engine.Job(f"s{seq_id}", None, None, list(range(prompt_len)), None, 8,
                     truncated=False, text=None)
    job.pos = pos
    return engine.Slot(seq_id, job=job)


def test_pieces_of_several_prompts_keep_their_kernel_paths():
    a, b, c = slot_at(0, 45, 0), slot_at(1, 20, 0), slot_at(2, 100, 64)
    pieces = engine.plan_pieces([a, b, c], 63)
    # whole 16-token pieces first, each at a multiple of 16 rows; then the last pieces
    assert [(s.seq_id, p, e) for s, p, e in pieces] == [(0, 0, 16), (0, 16, 32), (1, 0, 16),
                                                        (0, 32, 45), (1, 16, 18)]
    assert sum(e - p for _, p, e in pieces) == 63
    # a last piece is cut to fit (no reuse reaches past the last boundary)
    pieces = engine.plan_pieces([c, a], 40)
    assert [(s.seq_id, p, e) for s, p, e in pieces] == [(0, 0, 16), (0, 16, 32), (2, 64, 72)]
    # a whole piece that does not fit waits: no part of it goes ahead
    assert engine.plan_pieces([slot_at(0, 45, 0)], 15) == []
    assert not engine.is_long_piece(c.job) and engine.is_long_piece(slot_at(3, 200, 64).job)


def plan(slots: list[engine.Slot], room: int = engine.MIXED_ROWS,
         alone: bool = False) -> list[tuple[int, int, int]]:
    return [(s.seq_id, start, end) for s, start, end in engine.plan_pieces(slots, room, alone)]


def test_pieces_end_every_16_tokens_up_to_64_then_every_64_or_at_the_prompt_end():
    ends, pos = [], 0
    while pos < 300:
        pos = engine.piece_end(pos, 300)
        ends.append(pos)
    assert ends == [16, 32, 48, 64, 128, 192, 256, 300]
    assert engine.piece_end(20, 30) == 30  # a piece that starts off a boundary ends on one
    # how much of a cached prompt can be reused: the last boundary at or before it
    assert [engine.boundary_floor(n) for n in (0, 15, 16, 47, 63, 64, 127, 200)] == [
        0, 0, 16, 32, 48, 64, 64, 192]


def test_a_step_takes_whole_16_token_pieces_first_each_at_a_multiple_of_16_rows():
    a, b = slot_at(0, 40, 0), slot_at(1, 70, 16)  # 40 tokens; 70 with its first piece cached
    pieces = plan([a, b])
    # a fourth whole piece would make 64 rows, where attention turns tiled: b's waits
    assert pieces == [(0, 0, 16), (0, 16, 32), (1, 16, 32), (0, 32, 40)]
    rows = [0]
    for _, start, end in pieces:
        rows.append(rows[-1] + end - start)
    assert rows == [0, 16, 32, 48, 56]  # whole pieces start at rows 0, 16, 32
    assert rows[-1] <= engine.MIXED_ROWS == 63


def test_a_prompt_whose_next_whole_piece_does_not_fit_waits_whole():
    a, b = slot_at(0, 20, 0), slot_at(1, 60, 0)
    # room for 2 whole pieces, the oldest request's first; then a's last piece
    assert plan([a, b], room=40) == [(0, 0, 16), (1, 0, 16), (0, 16, 20)]
    # b, the older, takes both; a's first piece is a whole one: no part of it goes ahead
    assert plan([b, a], room=40) == [(1, 0, 16), (1, 16, 32)]


def test_the_last_piece_is_cut_to_the_room_left():
    short = slot_at(0, 13, 0)  # its only piece is its last
    assert plan([short], room=5) == [(0, 0, 5)]
    assert plan([slot_at(0, 45, 32)], room=63) == [(0, 32, 45)]


def test_a_64_token_piece_is_never_planned_beside_others():
    long = slot_at(0, 300, 64)  # its next piece is a whole 64-token one: it takes a step alone
    assert engine.is_long_piece(long.job) and plan([long]) == []
    last = slot_at(1, 100, 64)  # 36 tokens left: a last piece, planned like short ones
    assert not engine.is_long_piece(last.job) and plan([long, last]) == [(1, 64, 100)]
    exact = slot_at(2, 192, 128)  # a last piece of exactly 64 tokens is a whole one
    assert engine.is_long_piece(exact.job) and plan([exact]) == []


def test_a_lone_prompts_last_piece_under_8_rows_gets_a_step_of_its_own():
    # ggml-cpu multiplies unquantized-repack weights row by row under 8 rows and in tiles
    # from 8 on: the last piece must take the same path on a cache hit, where it runs alone
    assert engine.TILED_ROWS == 8
    lone = slot_at(0, 37, 0)  # pieces 0-16, 16-32, then 5 rows
    assert plan([lone], alone=True) == [(0, 0, 16), (0, 16, 32)]
    lone.job.pos = 32
    assert plan([lone], alone=True) == [(0, 32, 37)]
    assert plan([slot_at(0, 37, 0)]) == [(0, 0, 16), (0, 16, 32), (0, 32, 37)]  # not alone
    # 8 rows or more take the tiled path either way: they stay in the step
    assert plan([slot_at(0, 40, 0)], alone=True) == [(0, 0, 16), (0, 16, 32), (0, 32, 40)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 299)), min_size=1, max_size=5),
       st.integers(1, engine.MIXED_ROWS), st.booleans())
def test_every_plan_fits_its_room_and_keeps_each_prompt_in_order(prompts, room, alone):
    # prompts of n tokens, evaluated (or cached) up to a piece boundary short of their end
    slots = [slot_at(i, n, engine.boundary_floor(min(at, n - 1)))
             for i, (n, at) in enumerate(prompts)]
    slots = [s for s in slots if not engine.is_long_piece(s.job)]  # as BatchEngine.step does
    pieces = engine.plan_pieces(slots, room, alone)
    assert sum(end - start for _, start, end in pieces) <= room
    row, leading = 0, True
    for slot, start, end in pieces:
        n = len(slot.job.prompt)
        assert 0 <= start < end <= n
        if start < engine.PIECE and end - start == engine.SMALL_PIECE:  # a whole piece
            assert leading and row % engine.SMALL_PIECE == 0  # first, at a multiple of 16
        else:  # a last piece, maybe cut short: only last pieces follow it
            assert engine.piece_end(start, n) == n
            leading = False
        row += end - start
    for slot in slots:  # each prompt's pieces go on from its position, in order
        starts = [start for s, start, _ in pieces if s is slot]
        ends = [end for s, _, end in pieces if s is slot]
        assert starts == [slot.job.pos, *ends[:-1]][:len(starts)]
