"""The dcgm-exporter poller: scrape ``/metrics`` with aiohttp, diff, publish, repeat.

One poller per exporter (a DaemonSet next to it, or one per node from a central
deployment). Each round: GET the URL, parse it
(:func:`~connectors.dcgm.exposition.parse_exposition`), diff it against the
previous scrape (:func:`~connectors.dcgm.diff.diff`) and publish the events;
then wait ``interval_s``.

Failure policy -- the poller never dies of its source:

* HTTP errors (non-200, connection refused, DNS, timeouts, a body over
  ``max_bytes``) are logged, counted in ``gputriage_dcgm_scrapes_total{outcome}``,
  and retried after an exponential backoff with full jitter
  (:class:`connectors.backoff.Backoff`; a 429/503 ``Retry-After`` wins, capped).
* A body that is not a dcgm-exporter exposition becomes one dead-letter record
  (reason, field, the body's bytes) and a backoff: a misconfigured URL produces a
  trickle of dead letters, not a flood.
* A publish failure (Kafka down) keeps the diffed result *pending*: the next round
  re-sends exactly the same events (same ids) before it scrapes again, and the
  state only advances once they were acknowledged. At-least-once, never a gap.

The state (:class:`~connectors.dcgm.diff.DcgmState`) is written to ``state_path``
(when given) after every acknowledged publish, atomically (temp file + rename),
so a restarted poller diffs against its last scrape instead of taking a new
baseline. A state file that does not decode is logged and ignored (a baseline).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Histogram

from connectors.backoff import Backoff, retry_after_seconds
from connectors.dcgm.diff import MAX_BURST, DcgmState, DiffResult, diff
from connectors.dcgm.exposition import Scrape, parse_exposition
from connectors.kafka.producer import EventProducer
from connectors.state import load_state, save_state
from schemas.codec import RecordError
from schemas.dead_letters import DeadLetter
from schemas.keys import key_of

log = logging.getLogger("gputriage.dcgm")

MAX_BYTES: Final = 32 * 1024 * 1024
"""A full 8-GPU exposition is ~100 KiB; 32 MiB only stops a runaway endpoint."""
DEAD_LETTER_BODY: Final = 1024 * 1024
"""Bytes of a bad body kept in its dead letter."""


class DcgmMetrics:
    """The poller's Prometheus metrics, on their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.scrapes = Counter(
            "gputriage_dcgm_scrapes",
            "Scrapes of dcgm-exporter, by outcome (ok, http_error, unreachable, timeout, "
            "bad_exposition, publish_error, internal_error).",
            ["outcome"],
            registry=r,
        )
        self.events = Counter(
            "gputriage_dcgm_events", "Events published, by schema.", ["schema"], registry=r
        )
        self.dead_letters = Counter(
            "gputriage_dcgm_dead_letters", "Scrapes sent to the dead-letter topic.", registry=r
        )
        self.suppressed = Counter(
            "gputriage_dcgm_xids_suppressed",
            "XID occurrences of a burst beyond the per-scrape cap (no event of their own).",
            registry=r,
        )
        self.baseline = Counter(
            "gputriage_dcgm_baseline_xids",
            "Non-zero XID gauges/counts seen on a GPU's first scrape and not reported.",
            registry=r,
        )
        self.duration = Histogram(
            "gputriage_dcgm_scrape_duration_seconds",
            "Time to fetch and parse one scrape.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r,
        )


@dataclass(frozen=True)
class PollOptions:
    url: str
    cluster: str
    node: str
    interval_s: float = 15.0
    timeout_s: float = 10.0
    backoff: Backoff = field(default_factory=lambda: Backoff(initial_s=1.0, max_s=60.0))
    max_burst: int = MAX_BURST
    max_bytes: int = MAX_BYTES
    state_path: Path | None = None


class _Failed(Exception):
    def __init__(self, outcome: str, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.retry_after = retry_after


def _now() -> datetime:
    return datetime.now(UTC)


class DcgmPoller:
    """Scrape one exporter until stopped. :meth:`poll_once` is one round (tests drive it)."""

    def __init__(
        self,
        options: PollOptions,
        publisher: EventProducer,
        metrics: DcgmMetrics | None = None,
        *,
        clock: Callable[[], datetime] = _now,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.options = options
        self.publisher = publisher
        self.metrics = metrics or DcgmMetrics()
        self.clock = clock
        self.draw = draw
        self.state: DcgmState | None = _load(options.state_path)
        self.pending: DiffResult | None = None
        self.attempts = 0
        self.failures = 0
        """Consecutive failed rounds (the backoff exponent)."""
        self._retry_after: float | None = None

    async def poll_once(self, session: aiohttp.ClientSession) -> str:
        """One round; returns its outcome (``ok`` or a failure class). Never raises for the
        source's or the sink's failures."""
        self.attempts += 1
        try:
            outcome = await self._round(session)
        except Exception:  # a bug must not end a DaemonSet's only XID witness: log, retry
            log.exception("dcgm %s: scrape round failed", self.options.node)
            outcome = "internal_error"
        self.metrics.scrapes.labels(outcome).inc()
        if outcome == "ok":
            self.failures = 0
        else:
            self.failures += 1
        return outcome

    def next_delay(self) -> float:
        """Seconds until the next round: the interval after success, a backoff after failure."""
        if self.failures == 0:
            return self.options.interval_s
        return self.options.backoff.after(self.failures - 1, self._retry_after, self.draw)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set."""
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                await self.poll_once(session)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.next_delay())

    async def _round(self, session: aiohttp.ClientSession) -> str:
        self._retry_after = None
        if self.pending is not None and not await self._publish(self.pending):
            return "publish_error"
        started = time.monotonic()
        try:
            body = await self._fetch(session)
        except _Failed as exc:
            self._retry_after = exc.retry_after
            log.warning("dcgm scrape of %s failed (%s): %s", self.options.url, exc.outcome, exc)
            return exc.outcome
        parsed = parse_exposition(body.decode("utf-8", errors="replace"))
        self.metrics.duration.observe(time.monotonic() - started)
        if isinstance(parsed, RecordError):
            await self._dead_letter(body, parsed)
            return "bad_exposition"
        result = self._diff(parsed)
        return "ok" if await self._publish(result) else "publish_error"

    async def _fetch(self, session: aiohttp.ClientSession) -> bytes:
        opts = self.options
        timeout = aiohttp.ClientTimeout(total=opts.timeout_s)
        try:
            async with session.get(opts.url, timeout=timeout) as response:
                if response.status != 200:
                    retry = retry_after_seconds(response.headers)
                    raise _Failed("http_error", f"HTTP {response.status} {response.reason}", retry)
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.content.iter_chunked(1 << 16):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > opts.max_bytes:
                        raise _Failed("http_error", f"body larger than {opts.max_bytes} bytes")
                body = b"".join(chunks)
        except TimeoutError:
            raise _Failed("timeout", f"no complete answer within {opts.timeout_s:g} s") from None
        except aiohttp.ClientConnectionError as exc:
            raise _Failed("unreachable", str(exc) or type(exc).__name__) from None
        except aiohttp.ClientError as exc:
            raise _Failed("http_error", str(exc) or type(exc).__name__) from None
        return body

    def _diff(self, scrape: Scrape) -> DiffResult:
        opts = self.options
        result = diff(
            self.state,
            scrape,
            cluster=opts.cluster,
            node=opts.node,
            time=scrape.time or self.clock(),
            max_burst=opts.max_burst,
        )
        self.metrics.suppressed.inc(result.suppressed)
        self.metrics.baseline.inc(result.baseline)
        if result.baseline:
            log.info(
                "dcgm %s: %d non-zero XID gauge/count values on first sight, not reported "
                "(a baseline; see connectors.dcgm.diff)",
                opts.node,
                result.baseline,
            )
        return result

    async def _publish(self, result: DiffResult) -> bool:
        try:
            await self.publisher.send_many(result.events)
        except Exception as exc:  # any sink failure: keep it pending, retry
            self.pending = result
            log.warning(
                "dcgm %s: publishing %d events failed: %r",
                self.options.node,
                len(result.events),
                exc,
            )
            return False
        self.pending = None
        self.state = result.state
        for event in result.events:
            self.metrics.events.labels(type(event).__struct_config__.tag).inc()
        _save(self.options.state_path, result.state)
        return True

    async def _dead_letter(self, body: bytes, error: RecordError) -> None:
        opts = self.options
        log.warning("dcgm scrape of %s is not a dcgm-exporter exposition: %s", opts.url, error)
        letter = DeadLetter(
            topic=opts.url,
            partition=-1,
            offset=self.attempts,
            reason=error.reason,
            field=error.field,
            key=key_of(opts.cluster, opts.node).encode(),
            value=body[:DEAD_LETTER_BODY],
            timestamp_ms=int(self.clock().timestamp() * 1000),
        )
        try:
            await self.publisher.send_dead_letters([letter])
        except Exception as exc:  # the dead letter is best effort
            log.warning("dcgm %s: the dead letter could not be published: %r", opts.node, exc)
            return
        self.metrics.dead_letters.inc()


def _load(path: Path | None) -> DcgmState | None:
    """The saved state, or None (missing or undecodable: logged, a baseline follows)."""
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)  # fail at start, not after a scrape
    try:
        return load_state(path, DcgmState)
    except (OSError, RecordError) as exc:
        log.warning("dcgm state file %s ignored (a baseline scrape follows): %s", path, exc)
        return None


def _save(path: Path | None, state: DcgmState) -> None:
    """Write ``state`` atomically (:func:`connectors.state.save_state`); a failure is logged."""
    if path is None:
        return
    try:
        save_state(path, state)
    except OSError as exc:
        log.warning("dcgm state file %s could not be written: %s", path, exc)
