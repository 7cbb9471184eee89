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
    """`lines`, with `beat` sent after every `every_s` seconds in which none came.

    One task reads `lines` into a one-place queue for the whole stream, and the stream waits
    on the queue under a timeout: a timeout cancels only that wait (the line being computed
    is never restarted), and a line that is ready costs no task or timer of its own. Closing
    the stream early (the client went away) cancels the reader, which ends the generation
    behind it."""
    source = aiter(lines)
    queue: asyncio.Queue[tuple[str | None, BaseException | None]] = asyncio.Queue(maxsize=1)

    async def read() -> None:
        try:
            async for line in source:
                await queue.put((line, None))
        except Exception as e:  # handed to the stream, which raises it
            await queue.put((None, e))
            return
        await queue.put((None, None))

    reader = asyncio.ensure_future(read())
    try:
        while True:
            if queue.empty():
                try:
                    async with asyncio.timeout(every_s):
                        line, error = await queue.get()
                except TimeoutError:
                    yield beat
                    continue
            else:
                line, error = queue.get_nowait()
            if error is not None:
                raise error
            if line is None:
                return
            yield line
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
