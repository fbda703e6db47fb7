"""What every bridge endpoint does the same way over HTTP: one POST, one status policy,
one pacer.

:func:`post_bounded` posts on the runner's shared session, never following a redirect
(it would carry the body, a routing key or a token to another host) and reading at most
:data:`MAX_READ` bytes; :func:`classify` and :func:`status_outcome` are the one status
policy (2xx accepted; 400/413/422 rejected; 401/403 and 3xx retried after
:data:`AUTH_RETRY_SECONDS` with a warning; 408/425/429/5xx retried); :class:`Pacer` answers
a full window with ``Retry(after_seconds=...)`` instead of sleeping in ``deliver``.

Traps: aiohttp raises more than ``ClientError`` (a header with a newline is a
``ValueError`` from ``post``), and its messages name the URL or header, so a failure is
named by its class only; an answer body is read bounded. docs/bridges.md, design notes:
http.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import aiohttp

from connectors.backoff import parse_retry_after
from connectors.bridges.base import Rejected, Retry, clip, mask

log = logging.getLogger("gputriage.bridge.http")

MAX_READ: Final = 64 * 1024
"""The most of an answer's body any endpoint reads."""
AUTH_RETRY_SECONDS: Final = 60.0
"""How long a refused credential (401/403) or a redirect waits before the next try."""
RETRY_STATUSES: Final = frozenset({408, 425, 429})
REJECT_STATUSES: Final = frozenset({400, 413, 422})


class Verdict(enum.Enum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    RETRY = "retry"
    AUTH = "auth"
    """401/403: retried after a long wait, with a warning."""
    REDIRECT = "redirect"


def classify(status: int, permanent: Collection[int] = ()) -> Verdict:
    """The policy's class of ``status`` (see the module); ``permanent``: the vendor's own
    extra codes that are :attr:`Verdict.REJECTED`."""
    if 200 <= status < 300:
        return Verdict.ACCEPTED
    if status in REJECT_STATUSES or status in permanent:
        return Verdict.REJECTED
    if status in (401, 403):
        return Verdict.AUTH
    if 300 <= status < 400:
        return Verdict.REDIRECT
    return Verdict.RETRY


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back: the status, ``Retry-After`` in seconds, the body's head."""

    status: int
    retry_after: float | None
    body: bytes
    truncated: bool = False
    """The body was longer than :data:`MAX_READ`."""

    def text(self, secrets: Iterable[str] = ()) -> str:
        """The body as text, every secret masked (the tail too, when it was cut)."""
        return mask(self.body.decode("utf-8", "replace"), secrets, cut=self.truncated)


async def post_bounded(
    http: aiohttp.ClientSession,
    url: str,
    *,
    data: bytes,
    headers: Mapping[str, str],
    timeout: aiohttp.ClientTimeout,
    where: str = "",
    clock: Callable[[], float] = time.time,
) -> Answer | Retry:
    """POST ``data`` to ``url``; :class:`Answer`, or :class:`Retry` saying ``where`` and
    the exception's class (never its message: it can hold the URL or a header).
    ``clock`` (Unix time) dates an HTTP-date ``Retry-After``."""
    prefix = f"{where}: " if where else ""
    try:
        async with http.post(
            url, data=data, headers=headers, timeout=timeout, allow_redirects=False
        ) as response:
            body = await _read_head(response.content, MAX_READ)
            truncated = not response.content.at_eof()
            return Answer(
                response.status,
                parse_retry_after(
                    response.headers.get("Retry-After"), datetime.fromtimestamp(clock(), UTC)
                ),
                body,
                truncated,
            )
    except TimeoutError:
        total = timeout.total
        return Retry(f"{prefix}timeout" + (f" after {total:g} s" if total else ""))
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        # ValueError: a header value with a newline, a malformed URL (InvalidURL is one).
        return Retry(f"{prefix}network error: {exc.__class__.__name__}")


async def _read_head(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """Up to ``limit`` bytes of a body. Trap: ``StreamReader.read(n)`` returns what is
    buffered (maybe one small chunk), not ``n`` bytes: read until the limit or the end."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = await stream.read(left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def status_outcome(
    answer: Answer,
    *,
    route: str,
    where: str = "",
    secrets: Iterable[str] = (),
    permanent: Collection[int] = (),
    redirect_rejected: bool = False,
    said: str = "",
    detail: str = "",
    reason_chars: int = 300,
    detail_chars: int = 500,
) -> Retry | Rejected:
    """The outcome of a non-2xx ``answer`` by :func:`classify`. ``said`` (a short vendor
    error, with its separator: ``": invalid event"``) ends the reason, ``detail`` is a
    rejection's detail; both are masked, then cut (in that order: see
    :func:`~connectors.bridges.base.mask`)."""
    secrets = list(secrets)
    status = answer.status
    reason = (f"{where}: " if where else "") + f"HTTP {status}" + said
    reason = clip(mask(reason, secrets), reason_chars)
    detail = clip(mask(detail, secrets), detail_chars)
    verdict = classify(status, permanent)
    if verdict is Verdict.REJECTED:
        return Rejected(reason, detail)
    if verdict is Verdict.AUTH:
        return auth_retry(reason, route, answer.retry_after)
    if verdict is Verdict.REDIRECT:
        if redirect_rejected:
            return Rejected(f"{reason}: redirects are not followed")
        log.warning(
            "route %s: %s: a redirect, not followed: point the route at the final URL",
            route,
            reason,
        )
        wait = max(answer.retry_after or 0.0, AUTH_RETRY_SECONDS)
        return Retry(f"{reason}: redirects are not followed", wait)
    return Retry(reason, answer.retry_after)


def auth_retry(reason: str, route: str, retry_after: float | None = None) -> Retry:
    """A refused credential: a warning naming the route (never the credential) and a
    long wait, never a dead letter (a rotation in progress must not lose incidents)."""
    log.warning(
        "route %s: %s: the credential was refused (rotated or revoked?): retrying every "
        "%g s until it is fixed",
        route,
        reason,
        AUTH_RETRY_SECONDS,
    )
    return Retry(f"{reason} (credential refused)", max(retry_after or 0.0, AUTH_RETRY_SECONDS))


def loop_time() -> float:
    """The running loop's clock: the runner waits out a ``Retry`` on it, so a pacer on the
    same clock opens when that wait ends, under a test's fake clock (looptime) too."""
    return asyncio.get_running_loop().time()


class Pacer:
    """At most ``limit`` calls per key in any ``window_seconds`` (a sliding window).

    :meth:`take` answers at once, never sleeps: the caller returns
    ``Retry(after_seconds=...)`` and the runner keeps control (shutdown, other routes,
    commits); a stall shows in its retry metrics instead of as one slow delivery. Keys
    are never secrets (a routing key's hash, a channel id). Trap: the default clock is
    the running loop's, so :meth:`take` and :meth:`close` are called on the loop.
    """

    def __init__(
        self, limit: int, window_seconds: float, clock: Callable[[], float] = loop_time
    ) -> None:
        self.limit = max(1, limit)
        self.window_seconds = window_seconds
        self.clock = clock
        self._calls: dict[str, deque[float]] = {}
        self._closed_until: dict[str, float] = {}

    def take(self, key: str, cost: int = 1) -> float:
        """0, and ``cost`` calls are counted; or the seconds until they may be made."""
        now = self.clock()
        closed = self._closed_until.get(key, 0.0)
        if now < closed:
            return closed - now
        if self.window_seconds <= 0:
            return 0.0
        calls = self._calls.setdefault(key, deque())
        while calls and calls[0] <= now - self.window_seconds:
            calls.popleft()
        cost = min(max(cost, 1), self.limit)
        if len(calls) + cost > self.limit:
            return calls[len(calls) + cost - self.limit - 1] + self.window_seconds - now
        calls.extend([now] * cost)
        return 0.0

    def close(self, key: str, seconds: float) -> None:
        """The vendor said 429: nothing more through ``key`` for ``seconds``."""
        self._closed_until[key] = max(self._closed_until.get(key, 0.0), self.clock() + seconds)
