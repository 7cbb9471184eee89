"""Keep-alive lines while a stream is silent (app.server.heartbeat): a long prompt's minutes
before the first token must not look like a dead server to an agent's client."""

from __future__ import annotations

import asyncio

from app.server.heartbeat import with_heartbeats


def test_beats_fill_silences_lines_keep_their_order_and_an_early_close_ends_the_source():
    closed: list[str] = []

    async def answer():
        try:
            yield "first\n"
            await asyncio.sleep(0.35)  # a prompt being evaluated
            yield "second\n"
            await asyncio.sleep(10)  # the client leaves during this silence
            yield "never\n"
        finally:
            closed.append("source")

    async def main() -> list[str]:
        got = []
        stream = with_heartbeats(answer(), "beat\n", every_s=0.1)
        async for line in stream:
            got.append(line)
            if got.count("beat\n") == 5:
                break
        await stream.aclose()
        return got

    got = asyncio.run(main())
    assert got[0] == "first\n" and got.count("second\n") == 1
    assert 2 <= got.index("second\n") - 1 <= 4  # about 0.35 s / 0.1 s of beats before it
    assert "never\n" not in got
    assert closed == ["source"]  # the generation behind the stream was ended


def test_a_stream_that_ends_ends_without_beats():
    async def answer():
        yield "a"
        yield "b"

    async def main() -> list[str]:
        return [line async for line in with_heartbeats(answer(), "beat", every_s=0.05)]

    assert asyncio.run(main()) == ["a", "b"]
