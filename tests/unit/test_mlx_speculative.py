"""The mlx backend's prompt lookup on its own (speculation on the real models:
tests/integration/test_mlx_speculative_real_pair.py)."""

from __future__ import annotations

from backends.mlx.speculative import LookupProposer


def test_lookup_proposes_what_followed_the_latest_match():
    history = [5, 1, 2, 3, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3]
    assert LookupProposer().propose(history, 3) == [7, 8, 6]  # the later "1 2 3"
    assert LookupProposer().propose([1, 2, 3, 4], 3) == []  # nothing repeats
