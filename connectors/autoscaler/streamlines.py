"""Complete lines of a streamed HTTP body (a followed log, a watch), with a silence timeout.

Traps:

* aiohttp's ``readline`` raises past twice its read buffer (a status ConfigMap with
  hundreds of node groups is one long watch line): lines are split here from raw
  chunks, up to ``max_line_bytes``; the head of a longer line is handed out once and
  the rest of it is skipped up to its newline.
* A last line without its newline (the connection dropped mid-line) is *not* handed
  out: a resumed log stream serves it again, whole (its timestamp is not older than
  the last line handed out), so handing out the half would publish a broken line.
* No data for ``silence_seconds`` raises ``TimeoutError``: a connection a NAT dropped stays
  open for ever otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp


async def stream_lines(
    response: aiohttp.ClientResponse, *, silence_seconds: float, max_line_bytes: int
) -> AsyncIterator[bytes]:
    """Every non-blank complete line of ``response``'s body, in order."""
    buffer = bytearray()
    skipping = False  # inside a line whose head was already handed out
    while True:
        chunk = await asyncio.wait_for(response.content.readany(), silence_seconds)
        if not chunk:
            return
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line = bytes(buffer[start:end])
            start = end + 1
            if skipping:
                skipping = False
            elif line.strip():
                yield line[:max_line_bytes]
        del buffer[:start]
        if len(buffer) > max_line_bytes:
            if not skipping:
                yield bytes(buffer[:max_line_bytes])
                skipping = True
            buffer.clear()
