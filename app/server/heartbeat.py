"""Keep-alive lines in a server-sent event stream while the answer is silent: a long prompt
on a CPU takes minutes before its first token (an agent's 12k-token prompt on a busy laptop),
and clients give up on a silent stream (Claude Code abandoned one after 5 minutes and sent it
again). Anthropic's API sends `ping` events; OpenAI's streams take SSE comments, which every
client's parser skips."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

HEARTBEAT_S = 10.0
SSE_COMMENT = ": keep-alive\n\n"


async def with_heartbeats(lines: AsyncIterator[str], beat: str,
                          every_s: float = HEARTBEAT_S) -> AsyncIterator[str]:
    """`lines`, with `beat` sent after every `every_s` seconds in which none came. The next
    line is awaited across beats (never restarted), and left cancelled when the stream is
    closed early (the client went away), which ends the generation behind it."""
    source = aiter(lines)
    pending: asyncio.Future[str] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield beat
                continue
            finished, pending = pending, None
            try:
                line = finished.result()
            except StopAsyncIteration:
                return
            yield line
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
