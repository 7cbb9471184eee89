"""backends.logprobs against a plain float64 reference: the numbers every local backend's
logprobs come from."""

from __future__ import annotations

import numpy as np
import pytest

from backends.logprobs import log_softmax_at, token_logprob, top_tokens


def reference(row: np.ndarray) -> np.ndarray:
    x = row.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def reference_top(row: np.ndarray, n: int) -> list[int]:
    return sorted(range(len(row)), key=lambda t: (-row[t], t))[:n]


def test_log_softmax_of_a_vocabulary_sized_row_matches_float64():
    row = (np.random.default_rng(0).standard_normal(151_936) * 4).astype(np.float32)
    tokens = np.array([0, 7, 151_935, int(row.argmax()), int(row.argmin())])
    np.testing.assert_allclose(log_softmax_at(row, tokens), reference(row)[tokens],
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 3, 20, 40])
def test_top_tokens_are_the_highest_with_ties_by_lower_id(n):
    rng = np.random.default_rng(n)
    row = rng.integers(-5, 5, 200).astype(np.float32)  # many ties
    assert top_tokens(row, n) == reference_top(row, n)


def test_top_tokens_of_a_mostly_masked_row_take_the_lowest_masked_ids_last():
    row = np.full(8, -np.inf, dtype=np.float32)
    row[[5, 2]] = [1.0, 3.0]
    assert top_tokens(row, 5) == [2, 5, 0, 1, 3] == reference_top(row, 5)
    assert top_tokens(row, 20) == reference_top(row, 20)  # no more than the row has


def test_token_logprob_gives_the_token_and_its_alternatives_with_their_bytes():
    row = np.array([0.5, 2.0, -1.0, 2.0], dtype=np.float32)
    entry = token_logprob(row, 2, 2, lambda t: f"<{t}>".encode())
    expected = reference(row)
    assert entry.id == 2 and entry.token == "<2>" and entry.bytes == b"<2>"
    assert entry.logprob == pytest.approx(expected[2], abs=1e-7)
    assert [t.token for t in entry.top] == ["<1>", "<3>"]
    assert [t.logprob for t in entry.top] == pytest.approx(expected[[1, 3]], abs=1e-7)
