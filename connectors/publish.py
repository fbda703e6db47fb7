"""The one publish loop of every live connector: source → bounded buffer → Kafka → checkpoint.

:class:`Publisher` reads batches from a :class:`~connectors.source.Source` into a
:class:`~connectors.delivery.BoundedDelivery`, sends them, waits for every acknowledgement
and only then commits each batch's checkpoint, in order. One policy for "Kafka is down":
keep the batch, retry with backoff, let the buffer fill, stop reading the source; never
drop, never die of it. Every record is signed with the source's progress, and a quiet
source heartbeats.

Traps: the checkpoint trails the reads; stopping drains, bounded, always (``--once`` too);
a cancel waits for the drain, then is raised; ``enrich`` runs once, when read; retries
duplicate (ids make it harmless); a failed commit, or a send no retry can fix, is fatal.
In full: docs/connectors.md, design notes: connectors/publish.py.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from connectors.backoff import Backoff
from connectors.delivery import DELIVERY_BACKOFF, BoundedDelivery, DeliveryMetrics
from connectors.kafka.producer import EventProducer
from connectors.source import Batch, Source, dead_letters, liveness
from schemas import progress as wire
from schemas.codec import AnyEvent
from schemas.events import Event, GpuBindingEvent, Tick, XidEvent
from schemas.topics import SCHEMA_SOURCES

log = logging.getLogger("gputriage.connect")

E = TypeVar("E", bound=AnyEvent)
R = TypeVar("R")

Enrich = Callable[[E], E]
"""Completes an event before it is sent (``connect kmsg``: the GPU uuid of an XID's bus id).

Generic in the event type: the publish loop takes an ``Enrich[AnyEvent]``; a source family
writes its own narrower one (``Enrich[XidEvent]``) and adapts it (see ``connectors.xid.run``).
It runs once per event, when the batch is read; an exception from it ends the loop.
"""


HEARTBEAT_SECONDS: Final = 0.5
"""The default of :attr:`PublishOptions.heartbeat_seconds` and of every connector's
``heartbeat_seconds`` setting."""


NODE_SOURCE_SCHEMAS: Final[Mapping[str, tuple[type[Event], ...]]] = {
    "kmsg": (XidEvent,),
    "journal": (XidEvent,),
    "dcgm": (XidEvent, GpuBindingEvent),
    "nvml": (GpuBindingEvent, XidEvent),
    "pod-resources": (GpuBindingEvent,),
}
"""A node source's family (``schemas.wellknown.SOURCE_FAMILIES``) -> the schemas it publishes:
the raw topics whose partition of its own key it announces at start, so it heartbeats from
the first interval even if it never publishes a record (a kernel-log reader on a healthy
node, a dcgm scraper on an idle one). Without that, a quiet node agent is never heard, and
one restarted after it once published is heard no more: ``monitoring_gap`` would call it
silent. A rare record of another schema (a kmsg reader's reboot record) is announced when
it is first sent, as any new partition is. A family not named here announces nothing."""


@dataclass(frozen=True)
class PublishOptions:
    """How much to hold while Kafka is down, how to retry, how long to drain on stop."""

    capacity: int = 100
    """Batches buffered before the source is no longer read (backpressure)."""
    chunk: int = 10
    """Batches sent together (one round of acknowledgements)."""
    backoff: Backoff = DELIVERY_BACKOFF
    drain_timeout_seconds: float = 10.0
    """On stop (or when the source ends): how long to deliver what is buffered. Finite: an
    unbounded drain with Kafka down never ends (see the module)."""
    heartbeat_seconds: float | None = HEARTBEAT_SECONDS
    """After this long without publishing, send the source's progress as a heartbeat (a
    ``tick.v1``) to every raw partition it has published to (a node source: and its own
    key's, :data:`NODE_SOURCE_SCHEMAS`); None: never. Keep it well
    under the processor's ``source_idle_seconds`` (60 s), or a quiet source ages out.

    It bounds every incident's latency: a worker's watermark is the least progress of
    the sources it hears, and a quiet source's (a kmsg reader on a healthy node, a dcgm
    scraper between scrapes) is as old as its last heartbeat. Measured with
    ``bench/latency.py --quiet-sources 20`` at 2k events/s (2 shared cores), p99: 5.8 s
    at 5 s (the old default), 1.6 s at 1 s, 1.1 s at 0.5 s, 0.84 s at
    0.25 s. The price is one tiny record per interval per partition the source has
    used (a node agent: one or two): 0.5 s is ~4 records/s per node for kmsg plus dcgm.
    A busy source heartbeats not at all (it is never quiet)."""
    idle_is_caught_up: bool = True
    """An idle batch (the source read nothing) means it has delivered everything up to
    now: its progress becomes the wall clock. True for a live source (kmsg, journal,
    dcgm, nvml, a synced k8s watch); False for one replaying the past (a backfill), whose
    pauses say nothing about the present."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.drain_timeout_seconds) and self.drain_timeout_seconds >= 0):
            raise ValueError(
                f"drain_timeout_seconds must be finite and >= 0: {self.drain_timeout_seconds}"
            )
        beat = self.heartbeat_seconds
        if beat is not None and not (math.isfinite(beat) and beat > 0):
            raise ValueError(f"heartbeat_seconds must be finite and > 0: {beat}")


@dataclass(frozen=True)
class PublishResult:
    """How a :meth:`Publisher.run` ended."""

    ended: bool
    """The source ended by itself (``next_batch`` returned None), rather than ``stop``."""
    drained: bool
    """Everything read was delivered and committed."""
    delivered: int
    """Events and dead letters acknowledged."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A heartbeat in the delivery buffer: sends the progress acknowledged by then, or
    ``caught_up`` if later (taken when it was buffered: everything read before that
    moment is ahead of it in the buffer)."""

    caught_up: datetime | None = None
    end: bool = False
    """The source has ended: the last word, "hold nothing for me" (:data:`schemas.progress.END`)."""


Outgoing = Batch | Heartbeat
"""An item of the delivery buffer."""


def _now() -> float:
    """The running loop's clock: heartbeats and backoffs follow it, so a test's fake clock
    (looptime) drives them; in production it is ``time.monotonic``."""
    return asyncio.get_running_loop().time()


def _size(item: Outgoing) -> int:
    return 0 if isinstance(item, Heartbeat) else len(item.events) + len(item.dead)


def default_source_id(source: Source) -> str:
    """The id a source's records are signed with: its name, and its key when it has one
    (``kmsg:/dev/kmsg@c1/gpu-node-01``): stable across restarts, distinct across nodes."""
    if source.key:
        return f"{source.name}@{source.key.decode(errors='replace')}"
    return source.name


class Publisher:
    """Publish one :class:`~connectors.source.Source` until it ends or ``stop`` is set.

    Every raw record carries the source's id and progress, and a quiet source heartbeats: the
    processor's watermark is made of them. Traps: a heartbeat never overtakes a batch (same
    ordered buffer, sent once everything before it is acknowledged); progress is acknowledged
    progress and never goes back (a chunk carries what was acked *before* it, so a busy
    source's trails by one chunk); no progress, no heartbeat; heartbeats go to every raw
    partition the source has published to, and a node source's to its own key's from the
    start (:data:`NODE_SOURCE_SCHEMAS`); a new partition is announced before the progress
    covers it; a source that ends sends a last heartbeat with
    :data:`~schemas.progress.END`. In full: docs/connectors.md, design notes: Publisher.
    """

    def __init__(
        self,
        source: Source,
        producer: EventProducer,
        *,
        options: PublishOptions | None = None,
        metrics: DeliveryMetrics | None = None,
        enrich: Enrich[AnyEvent] | None = None,
        source_id: str | None = None,
    ) -> None:
        self.source = source
        self.producer = producer
        self.options = options = options or PublishOptions()
        self.metrics = metrics
        self.enrich = enrich
        self.source_id = source_id or default_source_id(source)
        self._source_header = (wire.SOURCE_HEADER, self.source_id.encode())
        key = (source.key or b"").decode(errors="replace")
        self._cluster, _, self._node = key.partition("/")
        """A node source's key is ``cluster/node``: its heartbeats name the node."""
        self.progress: datetime | None = None
        """The event time delivered up to: the greatest progress of the batches acknowledged
        so far (see the class)."""
        self._has_progress = False
        self.used: set[tuple[str, int]] = set()
        """Raw ``(topic, partition)`` this source has published to (acknowledged), and a node
        source's own key's partitions (:data:`NODE_SOURCE_SCHEMAS`), from its first send."""
        self._own: tuple[str, ...] = self._own_topics()
        """The raw topics whose partition of its own key a node source claims (see
        :meth:`_claim_own`); emptied once claimed."""
        self.heartbeats = 0
        """Heartbeats acknowledged (one per round, however many partitions it went to)."""
        self.announcements = 0
        """Announcement rounds sent: one per chunk that revealed a partition not used before."""
        self._announced = 0
        """How many of ``used`` the last acknowledged announcement named."""
        self._last_out = 0.0
        """The loop's time of the last record out (set when :meth:`run` starts)."""
        self._beat_pending = False
        self._caught_up: datetime | None = None
        self._fresh = False
        """Events were buffered since the last heartbeat: a closing one is due when idle."""
        self.delivery: BoundedDelivery[Outgoing] = BoundedDelivery(
            self._send,
            capacity=options.capacity,
            batch_size=options.chunk,
            backoff=options.backoff,
            metrics=metrics,
            size=_size,
            after=self._commit,
        )

    def _own_topics(self) -> tuple[str, ...]:
        family = getattr(self.source, "family", "")
        if not (self._node and self.source.key and isinstance(family, str)):
            return ()
        return tuple(
            self.producer.layout.raw_topic(schema) for schema in NODE_SOURCE_SCHEMAS.get(family, ())
        )

    async def _claim_own(self) -> None:
        """Add a node source's own key's partitions to :attr:`used` (the producer's
        partitioner: where its records would go), once, before its first send; they are
        announced before anything that follows, so a quiet node agent heartbeats from the
        first interval and is heard by the lane holding its node. Trap: the partition
        lookup may fail (metadata): it raises, and the chunk is retried like any send."""
        if self._own and self.source.key:
            self.used |= await self.producer.partitions_of(self.source.key, self._own)
        self._own = ()

    def _headers(self) -> list[tuple[str, bytes]]:
        progress = self.progress
        if progress is None:
            return [self._source_header]
        return [self._source_header, (wire.PROGRESS_HEADER, wire.encode_progress(progress))]

    async def _send(self, chunk: Sequence[Outgoing]) -> None:
        """Produce the chunk's events, dead letters and heartbeats; raises unless all are acked.

        Batches go out together (one round of acks), signed with the progress acked
        *before* this chunk; a heartbeat waits for the acks of everything before it
        in the chunk, then goes out on its own (see the class).
        """
        if self._own:
            await self._claim_own()
        batches: list[Batch] = []
        for item in chunk:
            if isinstance(item, Heartbeat):
                await self._send_batches(batches)
                batches = []
                await self._send_heartbeat(item)
            else:
                batches.append(item)
        await self._send_batches(batches)

    async def _send_batches(self, batches: Sequence[Batch]) -> None:
        events = [event for batch in batches for event in batch.events]  # enriched when read
        dead = [d for batch in batches for d in batch.dead]
        if events:
            await self.producer.send_many(events, headers=self._headers(), used=self.used)
            self._last_out = _now()
        if len(self.used) > self._announced:
            # Also when an earlier try of this chunk grew ``used`` and then failed: the
            # retry must still announce before the progress rises.
            await self._announce()
        if dead:
            source = self.source
            await self.producer.send_dead_letters(dead_letters(source.name, source.key, dead))
        for batch in batches:  # all acknowledged: the progress they carry is delivered
            if batch.progress is not None and (
                self.progress is None or batch.progress > self.progress
            ):
                self.progress = batch.progress
        if self.metrics is not None:
            for event in events:
                self.metrics.events_out.labels(SCHEMA_SOURCES.get(type(event), "other")).inc()

    async def _announce(self) -> None:
        """Tell every partition used so far about all of them, at the progress acked *before*
        the chunk that revealed the new ones (:mod:`schemas.progress`): a worker must read
        of a new partition before it reads a progress that covers its first record there.
        Once per new partition in the source's life, so cheap; the caller raises the
        progress only after this is acknowledged."""
        when = self.progress or datetime.now(UTC)  # the headers, not this, carry progress
        tick = self._tick(when)
        used = sorted(self.used)
        signed = [*self._headers(), (wire.PARTITIONS_HEADER, wire.encode_partitions(used))]
        await self.producer.send_heartbeats(tick, used, signed)
        self._announced = len(used)
        self.announcements += 1

    def _tick(self, when: datetime) -> Tick:
        """The heartbeat record: a clock reading, and for a node source who is alive.

        A node source (a ``cluster/node`` key and a ``family``, :func:`connectors.source.liveness`)
        names its node and family, and when it last read its input. Trap: ``read_at`` is read
        now, so it may be a read still in the buffer behind this heartbeat: it is capped at
        ``when`` (a tick never says it heard later than it vouches for).
        """
        family, read_at = liveness(self.source) if self._node else ("", None)
        if read_at is not None and read_at > when:
            read_at = when
        return Tick(
            id=f"heartbeat:{self.source_id}",
            cluster=self._cluster,
            time=when,
            node=self._node if family else "",
            source=family,
            read_at=read_at,
        )

    async def _send_heartbeat(self, item: Heartbeat) -> None:
        try:
            progress = self.progress
            if item.caught_up is not None and (progress is None or item.caught_up > progress):
                progress = item.caught_up
            if (progress is not None or item.end) and self.used:
                if len(self.used) > self._announced:  # a node source's own partitions
                    await self._announce()
                when = progress or datetime.now(UTC)
                tick = self._tick(when)
                value = wire.END if item.end else wire.encode_progress(when)
                signed = [self._source_header, (wire.PROGRESS_HEADER, value)]
                await self.producer.send_heartbeats(tick, sorted(self.used), signed)
                self.heartbeats += 1
            self.progress = progress  # everything before it is acknowledged, and so is it
        finally:
            self._beat_pending = False

    def _commit(self, chunk: Sequence[Outgoing]) -> None:
        for item in chunk:
            if not isinstance(item, Heartbeat):
                self.source.commit(item)

    async def _read(self, stop: asyncio.Event) -> bool:
        """Put every batch into the buffer, enriched; True when the source ended.

        Checks ``stop`` itself rather than relying on being cancelled: on Python
        3.11, ``asyncio.wait_for`` swallows a cancellation that arrives as its
        inner future completes (``connectors.xid.run.XidSource``'s idle wait on the
        stop event does exactly that), and the loop would spin on.
        """
        enrich = self.enrich
        caught_up = self.options.idle_is_caught_up
        while not stop.is_set():
            batch = await self.source.next_batch()
            if batch is None:
                # The last word, after everything else: the processor need not wait for a
                # source that will publish nothing more (a stop is not an end: a restarted
                # connector goes on, and its silence ages out instead).
                await self.delivery.put(Heartbeat(end=True))
                return True
            if batch.idle and caught_up:
                await self._idle()
            if batch.empty:
                continue
            if enrich is not None and batch.events:
                # Here, once, and not in _send: a retried chunk must not be enriched again,
                # and an enrichment that raises is this source's failure, not Kafka's.
                batch.events = [enrich(event) for event in batch.events]
            await self.delivery.put(batch)
            if batch.events:
                self._last_out = _now()
                self._fresh = True
            if batch.progress is not None:
                self._has_progress = True
        return False

    async def _idle(self) -> None:
        """The source is caught up: its progress is now, and if it published since the
        last heartbeat, a closing one goes out at once (the processor's watermark then
        passes those events without waiting ``heartbeat_seconds``)."""
        self._caught_up = datetime.now(UTC)
        self._has_progress = True
        if self._fresh and not self._beat_pending:
            self._fresh = False
            self._beat_pending = True
            self._last_out = _now()
            await self.delivery.put(Heartbeat(self._caught_up))

    async def _beat(self) -> None:
        """Put a heartbeat into the buffer whenever the source has published nothing for
        ``heartbeat_seconds`` (never while one is still on its way). Runs until cancelled.

        The sleep is this loop's clock (like a poll interval), not synchronisation.
        """
        interval = self.options.heartbeat_seconds
        if interval is None:
            await asyncio.Event().wait()  # never: cancelled with the others
            return
        while True:
            delay = self._last_out + interval - _now()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            self._last_out = _now()
            if not self._has_progress or self._beat_pending or self.delivery.closed:
                continue
            self._beat_pending = True
            self._fresh = False
            await self.delivery.put(Heartbeat(self._caught_up))

    async def _drain(self, delivering: asyncio.Task[None]) -> bool:
        """Deliver what is buffered (within the drain timeout); False if something is left.

        Waits on the delivery task too: if it dies meanwhile (a failed commit),
        the buffer never drains, and waiting for it alone would hang.
        """
        closing = asyncio.create_task(self.delivery.close(self.options.drain_timeout_seconds))
        await asyncio.wait({closing, delivering}, return_when=asyncio.FIRST_COMPLETED)
        if not closing.done() and not delivering.cancelled() and delivering.exception() is None:
            # The delivery task returns by itself once closed and empty, possibly one step
            # before ``closing`` sees the queue joined: that is a drained buffer, not a failure.
            return await closing
        if not closing.done():
            closing.cancel()
            await asyncio.gather(closing, return_exceptions=True)
            return False
        return closing.result()

    async def _wind_down(
        self,
        reading: asyncio.Task[bool],
        stopping: asyncio.Task[Any],
        delivering: asyncio.Task[None],
        beating: asyncio.Task[None],
    ) -> tuple[bool, BaseException | None]:
        """Stop reading, drain (bounded), stop delivering: (drained, what the delivery raised)."""
        for task in (reading, stopping, beating):
            task.cancel()
        await asyncio.gather(reading, stopping, beating, return_exceptions=True)
        drained = False
        if not delivering.done():
            drained = await self._drain(delivering)
        if not delivering.done():
            delivering.cancel()
        [result] = await asyncio.gather(delivering, return_exceptions=True)
        failed = result if isinstance(result, Exception) else None
        return drained, failed

    async def run(self, stop: asyncio.Event) -> PublishResult:
        """Read, deliver and commit until the source ends or ``stop`` is set; then drain.

        Raises what the source, ``enrich``, a commit or a non-transient send raised
        (after the drain); ``CancelledError`` if cancelled, also after the drain.
        """
        self._last_out = _now()
        if self.metrics is not None and self.delivery.failing_since is None:
            # The producer is started (it fetched metadata): a source that has nothing to
            # send yet, and so sends no heartbeat either, must not read as "not connected".
            self.metrics.kafka.set(True)
        delivering = asyncio.create_task(self.delivery.run(), name=f"deliver:{self.source.name}")
        reading = asyncio.create_task(self._read(stop), name=f"read:{self.source.name}")
        stopping = asyncio.create_task(stop.wait(), name="stop")
        beating = asyncio.create_task(self._beat(), name=f"heartbeat:{self.source.name}")
        ended = False
        try:
            done, _ = await asyncio.wait(
                {delivering, reading, stopping, beating}, return_when=asyncio.FIRST_COMPLETED
            )
            if delivering in done:
                delivering.result()  # a failed commit or a send no retry can fix: raise that
            if reading in done:
                ended = reading.result()  # a source (or enrich) that failed raises here
            if beating in done:
                beating.result()  # it only ends by failing
        finally:
            # Whatever ended the wait (stop, the end, an error, a cancel), and even if a
            # cancel arrives now: the wind-down runs to its end, then that cancel is raised.
            drained, failed = await _through_cancels(
                self._wind_down(reading, stopping, delivering, beating)
            )
        if failed is not None:
            raise failed  # a commit failed, or a send no retry can fix, while draining
        return PublishResult(ended=ended, drained=drained, delivered=self.delivery.delivered)


async def _through_cancels(work: Coroutine[Any, Any, R]) -> R:
    """Await ``work`` to its end even if cancelled meanwhile; then raise that cancellation.

    Not ``asyncio.shield``: a shielded await raises at the first cancel and the
    caller goes on while the work is still running (the old drain did, and the
    cancel was then swallowed). Here every cancel is absorbed until ``work`` ends
    (``work`` must be bounded: the drain is), and raised after: the cancelling
    caller sees ``CancelledError``, the task's cancel count stays as asyncio set it.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled() and task.exception() is not None:
            raise asyncio.CancelledError from task.exception()
        raise asyncio.CancelledError
    return task.result()
