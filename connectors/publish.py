"""The one publish loop of every live connector: source → bounded buffer → Kafka → checkpoint.

:class:`Publisher` reads :class:`~connectors.source.Batch`\\es from a
:class:`~connectors.source.Source` and puts them into a
:class:`~connectors.delivery.BoundedDelivery`; its delivery task sends a chunk
of batches (events with :meth:`EventProducer.send_many
<connectors.kafka.producer.EventProducer.send_many>`, dead letters with
``send_dead_letters``), waits for every acknowledgement, and only then commits
each batch's checkpoint, in order (:meth:`Source.commit
<connectors.source.Source.commit>`). One policy for "Kafka is down", for every
connector: keep the batch, retry it with backoff, let the buffer fill, and
stop reading the source (backpressure) -- never drop, never die of it.

Traps:

* **The checkpoint trails the reads.** The source is read ahead of the broker
  by at most ``capacity`` batches (plus a chunk in flight), and the state file
  only moves once a batch is acknowledged. A crash loses nothing: the
  restarted source re-reads from the state file and re-sends the same ids.
* **Stopping drains, bounded.** On ``stop`` the source is no longer read; what
  is buffered is delivered for up to ``drain_timeout_s`` (``None``: until it
  is, which ``--once`` uses: a backfill must not report success half done).
  What is not delivered by then is reported (:attr:`PublishResult.drained`)
  and re-read by the next start, since its checkpoint was never saved.
* **Retries duplicate.** A chunk whose acknowledgement was lost is sent again
  whole: at-least-once. Deterministic event ids make duplicates harmless.
* **A failed commit is fatal, a failed send is not** (see
  :mod:`connectors.delivery`): retrying a send cannot fix a read-only state
  directory.
* Three supervised tasks (read, deliver, the stop signal); the first to end
  decides, the others are cancelled and awaited: a crash of either surfaces
  as the exception of :meth:`Publisher.run`, after the buffer was drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from connectors.backoff import Backoff
from connectors.delivery import BoundedDelivery, DeliveryMetrics
from connectors.kafka.producer import EventProducer
from connectors.source import Batch, Source, dead_letters
from schemas.codec import AnyEvent
from schemas.topics import SCHEMA_SOURCES

log = logging.getLogger("gputriage.connect")

Enrich = Callable[[AnyEvent], AnyEvent]
"""Completes an event before it is sent (``connect kmsg``: the GPU uuid of an XID's bus id)."""


@dataclass(frozen=True)
class PublishOptions:
    """How much to hold while Kafka is down, how to retry, how long to drain on stop."""

    capacity: int = 100
    """Batches buffered before the source is no longer read (backpressure)."""
    chunk: int = 10
    """Batches sent together (one round of acknowledgements)."""
    backoff: Backoff = field(default_factory=lambda: Backoff(initial_s=0.2, max_s=10.0))
    drain_timeout_s: float | None = 10.0
    """On stop (or when the source ends): how long to deliver what is buffered; None: no limit."""


@dataclass(frozen=True)
class PublishResult:
    """How a :meth:`Publisher.run` ended."""

    ended: bool
    """The source ended by itself (``next_batch`` returned None), rather than ``stop``."""
    drained: bool
    """Everything read was delivered and committed."""
    delivered: int
    """Events and dead letters acknowledged."""


def _size(batch: Batch) -> int:
    return len(batch.events) + len(batch.dead)


class Publisher:
    """Publish one :class:`~connectors.source.Source` until it ends or ``stop`` is set."""

    def __init__(
        self,
        source: Source,
        producer: EventProducer,
        *,
        options: PublishOptions | None = None,
        metrics: DeliveryMetrics | None = None,
        enrich: Enrich | None = None,
    ) -> None:
        self.source = source
        self.producer = producer
        self.options = options = options or PublishOptions()
        self.metrics = metrics
        self.enrich = enrich
        self.delivery: BoundedDelivery[Batch] = BoundedDelivery(
            self._send,
            capacity=options.capacity,
            batch_size=options.chunk,
            backoff=options.backoff,
            metrics=metrics,
            size=_size,
            after=self._commit,
        )

    async def _send(self, chunk: Sequence[Batch]) -> None:
        """Produce the chunk's events and dead letters; raises unless every one is acked."""
        events = [event for batch in chunk for event in batch.events]
        if self.enrich is not None:
            enrich = self.enrich
            events = [enrich(event) for event in events]
        dead = [d for batch in chunk for d in batch.dead]
        if events:
            await self.producer.send_many(events)
        if dead:
            source = self.source
            await self.producer.send_dead_letters(dead_letters(source.name, source.key, dead))
        if self.metrics is not None:
            for event in events:
                self.metrics.events_out.labels(SCHEMA_SOURCES.get(type(event), "other")).inc()

    def _commit(self, chunk: Sequence[Batch]) -> None:
        for batch in chunk:
            self.source.commit(batch)

    async def _read(self, stop: asyncio.Event) -> bool:
        """Put every batch into the buffer; True when the source ended.

        Checks ``stop`` itself rather than relying on being cancelled: on Python
        3.11, ``asyncio.wait_for`` swallows a cancellation that arrives as its
        inner future completes (the kmsg feed's idle wait on the stop event does
        exactly that), and the loop would spin on.
        """
        while not stop.is_set():
            batch = await self.source.next_batch()
            if batch is None:
                return True
            if not batch.empty:
                await self.delivery.put(batch)
        return False

    async def _drain(self, delivering: asyncio.Task[None]) -> bool:
        """Deliver what is buffered (within the drain timeout); False if something is left.

        Waits on the delivery task too: if it dies meanwhile (a failed commit),
        the buffer never drains, and waiting for it alone would hang.
        """
        closing = asyncio.create_task(self.delivery.close(self.options.drain_timeout_s))
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

    async def run(self, stop: asyncio.Event) -> PublishResult:
        """Read, deliver and commit until the source ends or ``stop`` is set; then drain."""
        delivering = asyncio.create_task(self.delivery.run(), name=f"deliver:{self.source.name}")
        reading = asyncio.create_task(self._read(stop), name=f"read:{self.source.name}")
        stopping = asyncio.create_task(stop.wait(), name="stop")
        ended = drained = False
        try:
            done, _ = await asyncio.wait(
                {delivering, reading, stopping}, return_when=asyncio.FIRST_COMPLETED
            )
            if delivering in done:
                delivering.result()  # only a failed commit ends it: raise that
            if reading in done:
                ended = reading.result()  # a source that failed raises here
        finally:
            for task in (reading, stopping):
                task.cancel()
            await asyncio.gather(reading, stopping, return_exceptions=True)
            if not delivering.done():
                with contextlib.suppress(asyncio.CancelledError):
                    drained = await asyncio.shield(self._drain(delivering))
            if not delivering.done():
                delivering.cancel()
            results = await asyncio.gather(delivering, return_exceptions=True)
        if isinstance(results[0], Exception):
            raise results[0]  # a commit failed while draining
        return PublishResult(ended=ended, drained=drained, delivered=self.delivery.delivered)
