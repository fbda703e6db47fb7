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
* **Stopping drains, bounded, always.** On ``stop`` (or when the source
  ends) the source is no longer read; what is buffered is delivered for up to
  ``drain_timeout_s``, which is finite in every mode (``--once`` uses a
  generous one): with Kafka down an unbounded drain is a process that never
  exits. What is not delivered by then is reported
  (:attr:`PublishResult.drained`, and the connectors exit 1) and re-read by
  the next start, since its checkpoint was never saved.
* **A cancel waits for the drain, then is raised.** Cancelling :meth:`Publisher.run`
  (the Lease elector does, on lost leadership; ``asyncio.run`` does on Ctrl-C)
  still runs the bounded drain, and then raises ``CancelledError``: a caller that
  cancelled must see "cancelled", never a normal :class:`PublishResult` it would
  take for "finished". Further cancels while draining are absorbed into that one
  (the drain is bounded anyway); under ``asyncio.run`` a second Ctrl-C raises
  ``KeyboardInterrupt`` in the loop and skips it.
* **Enrich once, when read.** ``enrich`` runs as a batch is read, before it is
  buffered: a retried chunk is not enriched again, and an enrichment that fails
  is a failure of the source (it ends :meth:`Publisher.run`), not a delivery
  failure to be retried as if Kafka were down.
* **Retries duplicate.** A chunk whose acknowledgement was lost is sent again
  whole: at-least-once. Deterministic event ids make duplicates harmless.
* **A failed commit is fatal, and so is a send that no retry can fix** (see
  :mod:`connectors.delivery`): retrying cannot fix a read-only state directory,
  an event that has no topic (a tick) or one that cannot be encoded. Only an
  unreachable or busy broker is retried.
* Three supervised tasks (read, deliver, the stop signal); the first to end
  decides, the others are cancelled and awaited: a crash of either surfaces
  as the exception of :meth:`Publisher.run`, after the buffer was drained.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from connectors.backoff import Backoff
from connectors.delivery import DELIVERY_BACKOFF, BoundedDelivery, DeliveryMetrics
from connectors.kafka.producer import EventProducer
from connectors.source import Batch, Source, dead_letters
from schemas.codec import AnyEvent
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


@dataclass(frozen=True)
class PublishOptions:
    """How much to hold while Kafka is down, how to retry, how long to drain on stop."""

    capacity: int = 100
    """Batches buffered before the source is no longer read (backpressure)."""
    chunk: int = 10
    """Batches sent together (one round of acknowledgements)."""
    backoff: Backoff = DELIVERY_BACKOFF
    drain_timeout_s: float = 10.0
    """On stop (or when the source ends): how long to deliver what is buffered. Finite: an
    unbounded drain with Kafka down never ends (see the module)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.drain_timeout_s) and self.drain_timeout_s >= 0):
            raise ValueError(f"drain_timeout_s must be finite and >= 0: {self.drain_timeout_s}")


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
        enrich: Enrich[AnyEvent] | None = None,
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
        events = [event for batch in chunk for event in batch.events]  # enriched when read
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
        """Put every batch into the buffer, enriched; True when the source ended.

        Checks ``stop`` itself rather than relying on being cancelled: on Python
        3.11, ``asyncio.wait_for`` swallows a cancellation that arrives as its
        inner future completes (``connectors.xid.run.XidSource``'s idle wait on the
        stop event does exactly that), and the loop would spin on.
        """
        enrich = self.enrich
        while not stop.is_set():
            batch = await self.source.next_batch()
            if batch is None:
                return True
            if batch.empty:
                continue
            if enrich is not None and batch.events:
                # Here, once, and not in _send: a retried chunk must not be enriched again,
                # and an enrichment that raises is this source's failure, not Kafka's.
                batch.events = [enrich(event) for event in batch.events]
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

    async def _wind_down(
        self,
        reading: asyncio.Task[bool],
        stopping: asyncio.Task[Any],
        delivering: asyncio.Task[None],
    ) -> tuple[bool, BaseException | None]:
        """Stop reading, drain (bounded), stop delivering: (drained, what the delivery raised)."""
        for task in (reading, stopping):
            task.cancel()
        await asyncio.gather(reading, stopping, return_exceptions=True)
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
        delivering = asyncio.create_task(self.delivery.run(), name=f"deliver:{self.source.name}")
        reading = asyncio.create_task(self._read(stop), name=f"read:{self.source.name}")
        stopping = asyncio.create_task(stop.wait(), name="stop")
        ended = False
        try:
            done, _ = await asyncio.wait(
                {delivering, reading, stopping}, return_when=asyncio.FIRST_COMPLETED
            )
            if delivering in done:
                delivering.result()  # a failed commit or a send no retry can fix: raise that
            if reading in done:
                ended = reading.result()  # a source (or enrich) that failed raises here
        finally:
            # Whatever ended the wait (stop, the end, an error, a cancel), and even if a
            # cancel arrives now: the wind-down runs to its end, then that cancel is raised.
            drained, failed = await _through_cancels(self._wind_down(reading, stopping, delivering))
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
