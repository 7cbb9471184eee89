"""The llama.cpp engine's plan of prompt pieces, without a model: which rows of which prompts
one step evaluates (backends/llamacpp/engine.py explains why pieces end at fixed positions
and take fixed rows of a batch). That the plan keeps a cached prefix bit-exact is checked on
the real models in tests/integration/test_llamacpp_prefix_cache.py."""

from __future__ import annotations

from backends.llamacpp import engine


def slot_at(seq_id: int, prompt_len: int, pos: int) -> engine.Slot:
    job = engine.Job(f"s{seq_id}", None, None, list(range(prompt_len)), False, None, 8, None)
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
