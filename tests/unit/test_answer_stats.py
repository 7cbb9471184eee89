"""The line under an answer says only what was measured: a one-token answer has no decode
speed (nothing was decoded after the first token), so it shows none rather than 0.0."""

from __future__ import annotations

from app.gui.chat_view import stats_text


def test_a_one_token_answer_shows_no_speed_and_a_singular_token() -> None:
    assert stats_text({"completion_tokens": 1, "ttft_s": 0.34, "decode_tokens_per_s": 0.0}) \
        == "1 token · first token 0.34 s"


def test_a_longer_answer_shows_its_decode_speed() -> None:
    assert stats_text({"completion_tokens": 48, "ttft_s": 0.5, "decode_tokens_per_s": 27.94}) \
        == "48 tokens · first token 0.50 s · 27.9 tokens/s"
