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


def test_an_error_of_the_source_reaches_the_stream_after_its_lines():
    async def answer():
        yield "a"
        raise RuntimeError("the worker died")

    async def main() -> list[str]:
        got = []
        try:
            async for line in with_heartbeats(answer(), "beat", every_s=0.05):
                got.append(line)
        except RuntimeError as e:
            got.append(str(e))
        return got

    assert asyncio.run(main()) == ["a", "the worker died"]


def test_lines_that_are_ready_cost_no_task_each():
    """A stream of many lines starts one reader task, not one task per line."""
    async def answer():
        for i in range(200):
            yield str(i)

    async def main() -> tuple[list[str], int]:
        loop = asyncio.get_running_loop()
        made = 0
        factory = loop.get_task_factory()

        def counting(loop, coro, **kw):
            nonlocal made
            made += 1
            return asyncio.Task(coro, loop=loop, **kw) if factory is None \
                else factory(loop, coro, **kw)

        loop.set_task_factory(counting)
        got = [line async for line in with_heartbeats(answer(), "beat", every_s=5)]
        return got, made

    got, made = asyncio.run(main())
    assert got == [str(i) for i in range(200)] and made <= 2
