"""The dcgm-exporter poller: scrape ``/metrics`` with aiohttp, diff, publish, repeat.

Each round: GET the URL, parse it, diff it against the previous scrape and publish the
events, then wait ``interval_seconds``. The poller never dies of its source: HTTP errors back
off (``Retry-After`` wins, capped), a body that is no exposition is one dead letter and a
backoff, a sample with no valid time is a dead letter of its own.

Traps: each scrape is diffed against the previous *scrape*, not the last acknowledged one
(every event reported once); a failed send is the publish loop's retry, never a scrape
outcome; ``gputriage_dcgm_events_total`` counts on acknowledgement, so it lags while Kafka
is down; the diff state is saved atomically after acknowledgement, and one that does not
decode is ignored (a baseline). In full: docs/connectors.md, design notes:
connectors/dcgm/scrape.py.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Histogram

from connectors.backoff import Backoff, retry_after_seconds
from connectors.dcgm.diff import MAX_BURST, DcgmState, DiffResult, diff
from connectors.dcgm.exposition import BadSample, Scrape, parse_exposition
from connectors.dcgm.settings import DcgmSettings
from connectors.delivery import DeliveryMetrics
from connectors.kafka.producer import EventProducer, KafkaTarget
from connectors.publish import PublishOptions
from connectors.run import Served, run_source
from connectors.settings import required
from connectors.source import Batch
from connectors.state import load_state, save_state
from schemas.codec import AnyEvent, RecordError
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
            "bad_exposition, internal_error).",
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
        self.delivery = DeliveryMetrics(r)
        """The ``gputriage_connector_*`` delivery metrics every connector exports."""
        self.exporter = self.delivery.health.condition(
            "dcgm-exporter", detail="no scrape yet", affects="none"
        )
        """Holds while the last scrape was ``ok``; reported, failing no probe: an exporter
        that stopped answering is an XID witness gone, which restarting us does not bring
        back, and an unready agent on every such node would stall the DaemonSet's
        rollouts. ``gputriage_dcgm_scrapes_total{outcome}`` alerts on it."""


BACKOFF: Final = Backoff(initial_seconds=1.0, max_seconds=60.0)
"""Between failed scrapes (a Retry-After the exporter sends wins)."""


class _Failed(Exception):
    def __init__(self, outcome: str, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.retry_after = retry_after


def _now() -> datetime:
    return datetime.now(UTC)


CLAIM_EVERY_SECONDS: Final = 1.0
"""How often a dcgm source waiting for its next scrape says it is caught up (see
:class:`DcgmSource`): the heartbeats carry the last such claim."""


class DcgmPoller:
    """Scrape one exporter until stopped (:meth:`run`); the rounds are :class:`DcgmSource`'s.

    Holds what outlives one round: the acknowledged ``state`` (moved only by
    :meth:`delivered`), the consecutive ``failures`` that drive the backoff,
    and ``attempts`` (a dead letter's ``offset``).
    """

    def __init__(
        self,
        settings: DcgmSettings,
        metrics: DcgmMetrics | None = None,
        *,
        backoff: Backoff = BACKOFF,
        max_burst: int = MAX_BURST,
        max_bytes: int = MAX_BYTES,
        clock: Callable[[], datetime] = _now,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self.url = required(settings.url, "url")
        self.cluster = required(settings.cluster, "cluster")
        self.node = required(settings.node, "node")
        self.state_path = Path(settings.state_path) if settings.state_path else None
        self.backoff, self.max_burst, self.max_bytes = backoff, max_burst, max_bytes
        self.metrics = metrics or DcgmMetrics()
        self.clock = clock
        self.draw = draw
        self.state: DcgmState | None = _load(self.state_path)
        self.attempts = 0
        self.failures = 0
        """Consecutive failed rounds (the backoff exponent)."""
        self._retry_after: float | None = None

    def next_delay(self) -> float:
        """Seconds until the next round: the interval after success, a backoff after failure."""
        if self.failures == 0:
            return self.settings.interval_seconds
        return self.backoff.after(self.failures - 1, self._retry_after, self.draw)

    async def run(
        self, target: KafkaTarget | EventProducer, err: IO[str], stop: asyncio.Event | None = None
    ) -> int:
        """Scrape and publish (:class:`DcgmSource`, through :func:`connectors.run.run_source`)
        until stopped; the exit status."""

        async def started() -> None:
            every = self.settings.interval_seconds
            print(f"gputriage connect dcgm: scraping {self.url} every {every:g} s", file=err)

        async with aiohttp.ClientSession() as session:
            return await run_source(
                DcgmSource(self, session),
                target,
                name="connect dcgm",
                served=Served(metrics=self.metrics.delivery, port=self.settings.metrics_port),
                err=err,
                publish=PublishOptions(heartbeat_seconds=self.settings.heartbeat_seconds),
                stop=stop,
                started=started,
            )

    async def scrape(
        self,
        session: aiohttp.ClientSession,
        base: DcgmState | None,
        *,
        not_before: datetime | None = None,
    ) -> Scraped:
        """Fetch, parse and diff against ``base``; nothing is sent and no state is kept.

        ``not_before``: the source said it was caught up until then (:class:`DcgmSource`);
        an exposition stamped earlier (one that now carries its own timestamps) is taken
        at that time instead, or its events would be older than a claim already made."""
        self._retry_after = None
        loop_time = asyncio.get_running_loop().time  # the duration as the loop's timers see it
        started = loop_time()
        try:
            body = await self._fetch(session)
        except _Failed as exc:
            self._retry_after = exc.retry_after
            log.warning("dcgm scrape of %s failed (%s): %s", self.url, exc.outcome, exc)
            return Scraped(exc.outcome)
        parsed = parse_exposition(body.decode("utf-8", errors="replace"))
        self.metrics.duration.observe(loop_time() - started)
        if isinstance(parsed, RecordError):
            return Scraped("bad_exposition", letter=self._letter(body, parsed))
        when = parsed.time or self.clock()
        if not_before is not None and when < not_before:
            when = not_before
        letters = tuple(self._sample_letter(bad) for bad in parsed.bad)
        return Scraped(
            "ok",
            result=self._diff(base, parsed, when),
            time=when,
            letters=letters,
            stamped=parsed.time is not None,
        )

    async def _fetch(self, session: aiohttp.ClientSession) -> bytes:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_seconds)
        try:
            async with session.get(self.url, timeout=timeout) as response:
                if response.status != 200:
                    retry = retry_after_seconds(response.headers)
                    raise _Failed("http_error", f"HTTP {response.status} {response.reason}", retry)
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.content.iter_chunked(1 << 16):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise _Failed("http_error", f"body larger than {self.max_bytes} bytes")
                body = b"".join(chunks)
        except TimeoutError:
            within = self.settings.timeout_seconds
            raise _Failed("timeout", f"no complete answer within {within:g} s") from None
        except aiohttp.ClientConnectionError as exc:
            raise _Failed("unreachable", str(exc) or type(exc).__name__) from None
        except aiohttp.ClientError as exc:
            raise _Failed("http_error", str(exc) or type(exc).__name__) from None
        return body

    def _diff(self, base: DcgmState | None, scrape: Scrape, when: datetime) -> DiffResult:
        result = diff(
            base,
            scrape,
            cluster=self.cluster,
            node=self.node,
            time=when,
            max_burst=self.max_burst,
        )
        self.metrics.suppressed.inc(result.suppressed)
        self.metrics.baseline.inc(result.baseline)
        if result.baseline:
            log.info(
                "dcgm %s: %d non-zero XID gauge/count values on first sight, not reported "
                "(a baseline; see connectors.dcgm.diff)",
                self.node,
                result.baseline,
            )
        return result

    def delivered(self, state: DcgmState, events: Sequence[AnyEvent]) -> None:
        """``events`` and the scrape ``state`` describes are acknowledged: count, save."""
        self.state = state
        for event in events:
            self.metrics.events.labels(type(event).__struct_config__.tag).inc()
        _save(self.state_path, state)

    def _sample_letter(self, bad: BadSample) -> DeadLetter:
        """One sample left out of a good scrape (the rest of it is published)."""
        log.warning("dcgm scrape of %s: sample left out: %s: %s", self.url, bad.reason, bad.series)
        return DeadLetter(
            topic=self.url,
            partition=-1,
            offset=self.attempts,
            reason=bad.reason,
            field=bad.field,
            key=key_of(self.cluster, self.node).encode(),
            value=bad.series.encode()[:DEAD_LETTER_BODY],
            timestamp_ms=int(self.clock().timestamp() * 1000),
        )

    def _letter(self, body: bytes, error: RecordError) -> DeadLetter:
        log.warning("dcgm scrape of %s is not a dcgm-exporter exposition: %s", self.url, error)
        return DeadLetter(
            topic=self.url,
            partition=-1,
            offset=self.attempts,
            reason=error.reason,
            field=error.field,
            key=key_of(self.cluster, self.node).encode(),
            value=body[:DEAD_LETTER_BODY],
            timestamp_ms=int(self.clock().timestamp() * 1000),
        )


@dataclass(frozen=True)
class Scraped:
    """One scrape: its outcome, and the diff (ok) or the dead letter (bad exposition)."""

    outcome: str
    result: DiffResult | None = None
    letter: DeadLetter | None = None
    time: datetime | None = None
    """The scrape's time (the exposition's, else the poller's clock): the batch's progress."""
    letters: tuple[DeadLetter, ...] = ()
    """Samples left out of a good scrape (:attr:`Scrape.bad`), one dead letter each."""
    stamped: bool = False
    """``time`` came from the exposition's own timestamps, not the poller's clock."""


class DcgmSource:
    """A :class:`DcgmPoller` as a :class:`connectors.source.Source`: one scrape per batch.

    Waits the interval (or the backoff) before every scrape but the first, and diffs against
    the previous *scrape*, since the publish loop reads ahead of the acks; ``state`` advances
    only on :meth:`commit`. A failed scrape is an empty batch, a bad exposition one dead letter.

    Between scrapes it says it is caught up (an idle batch every ``claim_every_seconds``):
    otherwise its progress stays a whole interval behind, and every worker's watermark, the
    least progress of its sources, delays every incident by that much. Traps: not after an
    exposition with its own timestamps (it may say "older than now" next), nor with a poller on
    another clock (the claim is the loop's wall clock), nor after a failed scrape.
    docs/connectors.md, design notes: DcgmSource.
    """

    def __init__(
        self,
        poller: DcgmPoller,
        session: aiohttp.ClientSession,
        *,
        claim_every_seconds: float = CLAIM_EVERY_SECONDS,
    ) -> None:
        self.poller = poller
        self.session = session
        self.name = poller.url
        self.key: bytes | None = key_of(poller.cluster, poller.node).encode()
        self._base = poller.state
        self._rounds = 0
        self.claim_every_seconds = claim_every_seconds
        self._due: float | None = None
        """When the next scrape is due (the loop's time), while waiting for it."""
        self._claims_now = False
        """The last scrape was stamped with the poller's wall clock: see the class."""
        self._claimed: datetime | None = None
        """When this source last said it was caught up (the poller's clock)."""
        self._read_at: datetime | None = None
        self.family = "dcgm"
        """Its heartbeats' ``Tick.source`` (see :meth:`read_at`)."""

    def read_at(self) -> datetime | None:
        """The time of the last scrape that answered ok (None: none yet).

        Why: a failed scrape is an idle batch, so this source's progress (its heartbeats'
        time) keeps advancing while the exporter refuses; this is what says it is blind.
        A bad exposition is no ok scrape either."""
        return self._read_at

    async def next_batch(self) -> Batch | None:
        poller = self.poller
        if self._rounds:
            loop_time = asyncio.get_running_loop().time  # the sleeps' own clock (looptime in tests)
            if self._due is None:
                self._due = loop_time() + poller.next_delay()
            wait = self._due - loop_time()
            if wait > 0 and self._claims_now and poller.failures == 0:
                await asyncio.sleep(min(wait, self.claim_every_seconds))
                if self._due - loop_time() > 0:
                    # Microseconds before the publish loop's own claim (it reads the clock
                    # next): the grace covers that much.
                    self._claimed = poller.clock()
                    return Batch()  # idle: caught up until the next scrape (the class)
            elif wait > 0:
                await asyncio.sleep(wait)
            self._due = None
        self._rounds += 1
        poller.attempts += 1
        try:
            scraped = await poller.scrape(self.session, self._base, not_before=self._claimed)
        except Exception:  # a bug must not end a DaemonSet's only XID witness: log, retry
            log.exception("dcgm %s: scrape round failed", poller.node)
            scraped = Scraped("internal_error")
        poller.metrics.scrapes.labels(scraped.outcome).inc()
        poller.metrics.exporter.set(
            scraped.outcome == "ok", "" if scraped.outcome == "ok" else f"scrape {scraped.outcome}"
        )
        poller.failures = 0 if scraped.outcome == "ok" else poller.failures + 1
        if scraped.letter is not None:
            return Batch(dead=[scraped.letter], records=1)
        if scraped.result is None:
            return Batch()
        result = scraped.result
        self._read_at = scraped.time
        self._base = result.state
        self._claims_now = not scraped.stamped and poller.clock is _now
        return Batch(
            events=list(result.events),
            dead=list(scraped.letters),
            state=result.state,
            records=1,
            progress=scraped.time,
        )

    def commit(self, batch: Batch) -> None:
        """Count and save what was acknowledged (the state file write is logged on failure)."""
        if isinstance(batch.state, DcgmState):
            self.poller.delivered(batch.state, batch.events)
        if batch.dead:
            self.poller.metrics.dead_letters.inc(len(batch.dead))

    async def close(self) -> None:
        """The session belongs to :meth:`DcgmPoller.run`, which closes it."""


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
