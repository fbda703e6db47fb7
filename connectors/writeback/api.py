"""The API calls the write-back makes, raw (status + decoded body), and the gate every write
passes: the rate limit, ``--dry-run``, the metrics.

Why raw: the generated models drop what they do not know and raise on every non-2xx; the
write-back decides by status (404 gone, 409 exists/conflict) and keeps the server's JSON.

Traps: the client sends with no timeout, so each call is bounded here; a dry run still
reads (pods, nodes, Events) so its lines say what a real run would do, but never writes;
the limiters (aiolimiter, leaky buckets on the loop's clock) hold writes only, not reads,
and node marks have a bucket of their own, so a clear is never queued behind Event bumps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TextIO

import aiohttp
from aiolimiter import AsyncLimiter
from kubernetes_asyncio.client import ApiClient, CoreV1Api, EventsV1Api

from connectors.writeback.metrics import WritebackMetrics
from schemas import codec

log = logging.getLogger("gputriage.writeback")

MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
MARK_KINDS = frozenset(("condition", "taint"))


def raw(content_type: str = "") -> dict[str, Any]:
    """The generated client's keyword arguments for a raw answer (and a patch's content type;
    the stubs do not declare them)."""
    options: dict[str, Any] = {"_preload_content": False}
    if content_type:
        options["_content_type"] = content_type
    return options


class ApiError(RuntimeError):
    """An answer the write-back cannot act on (5xx, 403, a timeout); the caller counts it."""


def micro_time(when: datetime) -> str:
    """A Kubernetes MicroTime (``eventTime``, ``series.lastObservedTime``)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(when: datetime) -> str:
    """A Kubernetes Time (``lastTransitionTime``): seconds."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kube:
    """The few calls made, each answering ``(status, body)``; bounded by ``timeout_seconds``."""

    def __init__(self, api: ApiClient, *, timeout_seconds: float = 10.0) -> None:
        self.core = CoreV1Api(api)
        self.events = EventsV1Api(api)
        self.timeout_seconds = timeout_seconds

    async def call(self, request: Awaitable[Any], what: str) -> tuple[int, Any]:
        try:
            async with asyncio.timeout(self.timeout_seconds):
                response: aiohttp.ClientResponse = await request
                try:
                    raw = await response.read()
                finally:
                    response.release()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ApiError(f"{what}: {exc!r}") from None
        body: Any = None
        if raw:
            try:
                body = codec.loads(raw)
            except ValueError:
                body = None
        if response.status >= 500 or response.status in (401, 403):
            message = body.get("message", "") if isinstance(body, dict) else ""
            raise ApiError(f"{what}: HTTP {response.status} {message}".rstrip())
        return response.status, body


class Gate:
    """Every write goes through :meth:`write`: printed (dry run) or rate-limited and sent."""

    def __init__(
        self,
        *,
        writes_per_second: float,
        burst: int,
        dry_run: bool,
        metrics: WritebackMetrics,
        out: TextIO | None = None,
    ) -> None:
        self.dry_run = dry_run
        self.metrics = metrics
        self.out = out
        self.limiter = AsyncLimiter(burst, burst / writes_per_second)
        self.mark_limiter = AsyncLimiter(burst, burst / writes_per_second)
        """Node marks' own bucket: a storm of Event bumps never delays a clear."""
        self.sent = 0
        """Writes sent to the API so far (tests wait on it)."""

    def show(self, line: str) -> None:
        """One kubectl-like line of a write (printed in a dry run, logged otherwise)."""
        if self.dry_run and self.out is not None:
            print(line, file=self.out, flush=True)
        else:
            log.info("%s", line)

    async def write(
        self, kind: str, line: str, send: Callable[[], Awaitable[tuple[int, Any]]]
    ) -> tuple[int, Any] | None:
        """Print ``line`` and write nothing (dry run, answers None), or send within the rate."""
        self.show(line)
        if self.dry_run:
            self.metrics.wrote(kind, "dry_run")
            return None
        async with self.mark_limiter if kind in MARK_KINDS else self.limiter:
            self.sent += 1
            return await send()
