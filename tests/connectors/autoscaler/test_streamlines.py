"""stream_lines over a real aiohttp server: chunks split anywhere, an over-long line, a
half line at a drop, silence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from connectors.autoscaler.streamlines import stream_lines

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(10)]


@asynccontextmanager
async def serving(chunks: list[bytes], *, then_wait: bool = False) -> AsyncIterator[str]:
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
        if then_wait:
            await release.wait()  # silent until the test ends: the client must give up
        return response

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        release.set()
        await runner.cleanup()


async def lines(url: str, *, silence_seconds: float = 5.0, limit: int = 1024) -> list[bytes]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return [
            line
            async for line in stream_lines(
                response, silence_seconds=silence_seconds, max_line_bytes=limit
            )
        ]


async def test_lines_split_across_chunks_and_a_half_line_at_the_end() -> None:
    async with serving([b"a\nb", b"b\n\n", b"c\r\nhalf"]) as url:
        assert await lines(url) == [b"a", b"bb", b"c\r"]


async def test_an_over_long_line_gives_its_head_once() -> None:
    async with serving([b"x" * 30, b"y" * 30, b"z\nnext\n"]) as url:
        assert await lines(url, limit=16) == [b"x" * 16, b"next"]


async def test_silence_is_a_timeout() -> None:
    async with serving([b"one\n"], then_wait=True) as url:
        with pytest.raises(TimeoutError):
            await lines(url, silence_seconds=0.2)
