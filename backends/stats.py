"""A request's Stats from its counts and the moments its tokens came: one formula for every
backend (the llama.cpp, MLX and cuda engines, and remote servers), so their numbers compare.
"""

from __future__ import annotations

from backends.base import FinishReason, Stats


def request_stats(*, prompt_tokens: int, completion_tokens: int, started: float,
                  first_at: float | None, last_at: float | None, end: float,
                  finish_reason: FinishReason, truncated: bool, cached_tokens: int = 0,
                  draft_tokens: int = 0, accepted_tokens: int = 0,
                  reasoning_tokens: int = 0, speculation_off: str = "",
                  stop_sequence: str | None = None, media_tokens: int = 0,
                  disk_tokens: int = 0) -> Stats:
    """`started`, `first_at` (first token), `last_at` (last token) and `end` on one clock.
    Decode speed counts the tokens after the first over the time they took, so the prompt's
    evaluation (or a prompt cache hit) does not count."""
    decode_s = (last_at - first_at) if first_at is not None and last_at is not None else 0.0
    return Stats(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        ttft_s=round((first_at if first_at is not None else end) - started, 4),
        decode_tokens_per_s=round((completion_tokens - 1) / decode_s, 2)
        if decode_s > 0 and completion_tokens > 1 else 0.0,
        finish_reason=finish_reason, truncated=truncated, total_s=round(end - started, 4),
        cached_tokens=cached_tokens, draft_tokens=draft_tokens,
        accepted_tokens=accepted_tokens, reasoning_tokens=reasoning_tokens,
        speculation_off=speculation_off, stop_sequence=stop_sequence,
        media_tokens=media_tokens, disk_tokens=disk_tokens)
