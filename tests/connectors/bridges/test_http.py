"""The pieces every bridge endpoint shares: secrets read and masked, clipping, the one
POST with its status policy, the pacer (connectors/bridges/{base,http}.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast
from urllib.parse import quote, quote_plus

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from connectors.bridges.base import (
    Rejected,
    Retry,
    SecretError,
    clip,
    mask,
    read_secret,
    url_secrets,
)
from connectors.bridges.http import (
    MAX_READ,
    Answer,
    Pacer,
    Verdict,
    _read_head,
    classify,
    post_bounded,
    status_outcome,
)

SECRET = "s3cr3t/t0ken with space"
TIMEOUT = aiohttp.ClientTimeout(total=5)


# -- read_secret ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("s3cr3t\n", None),  # one trailing newline: a mounted Secret's, stripped
        ("s3cr3t\n\n", "control character"),
        ("s3\tcr3t", "control character"),
        ("s3cr3t\x00", "control character"),
        (" s3cr3t", "whitespace"),
        ("s3cr3t \n", "whitespace"),
        ("\n", "empty"),
    ],
)
def test_a_secret_file_with_a_control_character_is_refused_naming_the_file_only(
    tmp_path: Path, content: str, error: str | None
) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    target = {"token_file": str(path)}
    if error is None:
        assert read_secret(target, "token").reveal() == "s3cr3t"
        return
    with pytest.raises(SecretError, match=error) as raised:
        read_secret(target, "token")
    assert str(path) in str(raised.value)
    assert "s3cr3t" not in str(raised.value)


def test_an_environment_secret_with_a_newline_is_refused() -> None:
    with pytest.raises(SecretError, match="TOKEN holds a control character"):
        read_secret({"token_env": "TOKEN"}, "token", {"TOKEN": "xoxb-1\n"})
    with pytest.raises(SecretError, match="whitespace"):
        read_secret({"token_env": "TOKEN"}, "token", {"TOKEN": " xoxb-1"})
    assert read_secret({"token_env": "TOKEN"}, "token", {"TOKEN": "xoxb-1"}).reveal() == "xoxb-1"


# -- mask and clip -------------------------------------------------------------------------
def test_mask_hides_a_secret_as_sent_and_percent_encoded_in_either_case() -> None:
    encoded = quote(SECRET, safe="")
    text = f"a {SECRET} b {encoded} c {encoded.lower()} d {quote_plus(SECRET)} e {quote(SECRET)}"
    masked = mask(text, [SECRET])
    assert masked == "a *** b *** c *** d *** e ***"


def test_mask_hides_the_head_of_a_secret_a_bounded_read_cut() -> None:
    assert mask("error: s3cr3t/t0", [SECRET], cut=True) == "error: ***"
    assert mask("error: s3c", [SECRET], cut=True) == "error: s3c"  # too short to tell
    assert mask("error: s3cr3t/t0", [SECRET]) == "error: s3cr3t/t0"  # whole: no head cut


@pytest.mark.asyncio
async def test_an_answer_cut_inside_a_secret_hides_its_head(server: str) -> None:
    async with aiohttp.ClientSession() as http:
        got = await post_bounded(http, server + "/echo", data=b"{}", headers={}, timeout=TIMEOUT)
    assert isinstance(got, Answer)
    assert got.truncated
    assert got.body.endswith(SECRET[:10].encode())
    assert got.text([SECRET]).endswith("e***")


def test_mask_before_clip_never_leaves_half_a_secret() -> None:
    text = "x" * 495 + SECRET
    assert "s3cr" not in clip(mask(text, [SECRET]), 500)
    assert clip(mask(text, [SECRET]), 500) == "x" * 495 + "***"


def test_url_secrets_are_the_url_its_path_and_query() -> None:
    url = "https://hooks.example/services/T0/B0/abcd?sig=qqqq"
    assert url_secrets(url) == [url, "/services/T0/B0/abcd", "sig=qqqq"]
    assert url_secrets("https://hooks.example/") == ["https://hooks.example/"]


def test_clip_marks_a_cut_and_keeps_the_limit() -> None:
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abcdefg", 6) == "abcde…"
    assert clip("abcdefghijklmnop", 14, " …[clipped]") == "abc …[clipped]"


# -- the status policy ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, Verdict.ACCEPTED),
        (202, Verdict.ACCEPTED),
        (204, Verdict.ACCEPTED),
        (400, Verdict.REJECTED),
        (413, Verdict.REJECTED),
        (422, Verdict.REJECTED),
        (401, Verdict.AUTH),
        (403, Verdict.AUTH),
        (301, Verdict.REDIRECT),
        (307, Verdict.REDIRECT),
        (408, Verdict.RETRY),
        (425, Verdict.RETRY),
        (429, Verdict.RETRY),
        (500, Verdict.RETRY),
        (503, Verdict.RETRY),
        (404, Verdict.RETRY),
    ],
)
def test_one_policy_for_status_classes(status: int, verdict: Verdict) -> None:
    assert classify(status) is verdict


def test_vendor_permanent_codes_and_redirect_rejection() -> None:
    assert classify(410, permanent={404, 410}) is Verdict.REJECTED
    gone = status_outcome(Answer(302, None, b""), route="r", redirect_rejected=True)
    assert gone == Rejected("HTTP 302: redirects are not followed")
    moved = status_outcome(Answer(302, None, b""), route="r")
    assert moved == Retry("HTTP 302: redirects are not followed", 60.0)
    auth = status_outcome(Answer(401, 5.0, b""), route="r", where="x")
    assert auth == Retry("x: HTTP 401 (credential refused)", 60.0)


def test_status_outcome_masks_then_cuts_reason_and_detail() -> None:
    answer = Answer(400, None, b"")
    outcome = status_outcome(
        answer, route="r", secrets=[SECRET], said=f": {SECRET}", detail="y" * 10 + SECRET
    )
    assert outcome == Rejected("HTTP 400: ***", "y" * 10 + "***")


# -- post_bounded --------------------------------------------------------------------------
@pytest_asyncio.fixture
async def server() -> AsyncIterator[str]:
    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=500)
        await response.prepare(request)
        for _ in range(4096):  # 4 MiB in small chunks, far past what is read
            await response.write(b"e" * 1024)
        return response

    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "/elsewhere"})

    async def echo(request: web.Request) -> web.Response:
        # The secret straddles the 64 KiB read: its first 10 characters are read.
        return web.Response(status=404, body=b"e" * (MAX_READ - 10) + SECRET.encode() * 2)

    app = web.Application()
    app.router.add_post("/echo", echo)
    app.router.add_post("/big", big)
    app.router.add_post("/redirect", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_post_bounded_reads_at_most_64_kib_and_follows_no_redirect(server: str) -> None:
    async with aiohttp.ClientSession() as http:
        big = await post_bounded(http, server + "/big", data=b"{}", headers={}, timeout=TIMEOUT)
        moved = await post_bounded(
            http, server + "/redirect", data=b"{}", headers={}, timeout=TIMEOUT
        )
    assert isinstance(big, Answer)
    assert (big.status, len(big.body), big.truncated) == (500, MAX_READ, True)
    assert isinstance(moved, Answer)
    assert moved.status == 302


@pytest.mark.asyncio
async def test_post_bounded_turns_a_bad_header_or_url_into_retry_by_class(server: str) -> None:
    """aiohttp raises ValueError for a header value with a newline (a secret read with
    one) and InvalidURL for a bad URL: values here, never exceptions, never the value."""
    async with aiohttp.ClientSession() as http:
        header = await post_bounded(
            http,
            server + "/big",
            data=b"{}",
            headers={"Authorization": "Bearer tok\n\nen"},
            timeout=TIMEOUT,
            where="w",
        )
        url = await post_bounded(
            http, "http://[::1/s3cr3t", data=b"{}", headers={}, timeout=TIMEOUT
        )
    assert header == Retry("w: network error: ValueError")
    assert isinstance(url, Retry)
    assert url.reason.startswith("network error: ")
    assert "s3cr3t" not in url.reason


# -- the pacer -----------------------------------------------------------------------------
def test_pacer_counts_a_sliding_window_with_costs_and_closes() -> None:
    now = [0.0]
    pacer = Pacer(4, 4.0, lambda: now[0])
    assert pacer.take("c", cost=2) == 0.0
    now[0] = 1.0
    assert pacer.take("c") == 0.0
    assert pacer.take("c", cost=2) == pytest.approx(3.0)  # the first two leave at 4.0
    assert pacer.take("d", cost=2) == 0.0  # per key
    now[0] = 4.0
    assert pacer.take("c", cost=2) == 0.0
    pacer.close("c", 10.0)
    assert pacer.take("c") == pytest.approx(10.0)
    unpaced = Pacer(4, 0.0, lambda: now[0])
    assert all(unpaced.take("c") == 0.0 for _ in range(100))


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_the_pacers_default_clock_is_the_loops_the_runner_waits_on() -> None:
    """The runner waits out a ``Retry`` on the loop's clock: a pacer on the wall clock
    would still be shut when looptime has fast-forwarded that wait."""
    pacer = Pacer(1, 60.0)
    assert pacer.take("c") == 0.0
    wait = pacer.take("c")
    assert wait == pytest.approx(60.0)
    await asyncio.sleep(wait)
    assert pacer.take("c") == 0.0
    pacer.close("d", 30.0)  # a 429 on another key
    assert pacer.take("d") == pytest.approx(30.0)
    await asyncio.sleep(30.0)
    assert pacer.take("d") == 0.0


class _Trickle:
    """A body that arrives 1000 bytes a read, as a slow proxy's does."""

    def __init__(self, size: int) -> None:
        self.left = size

    async def read(self, n: int = -1) -> bytes:
        got = min(self.left, 1000, n)
        self.left -= got
        return b"t" * got


@pytest.mark.asyncio
async def test_the_bounded_read_reads_up_to_the_limit_not_one_chunk() -> None:
    """StreamReader.read(n) returns what is buffered: one read would keep 1000 bytes of
    an answer, and a detail would miss what the vendor said after them."""
    stream = cast(aiohttp.StreamReader, _Trickle(200_000))
    assert len(await _read_head(stream, MAX_READ)) == MAX_READ
    short = cast(aiohttp.StreamReader, _Trickle(2500))
    assert len(await _read_head(short, MAX_READ)) == 2500
