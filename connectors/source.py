"""One shape for every live source: an async stream of batches, each with its checkpoint.

Modelled on bytewax's ``StatefulSourcePartition`` (``next_batch`` /
``snapshot`` / ``close``), adapted to "commit after delivery" (a checkpoint moves only
once Kafka has the batch): the :class:`Source` hands out a :class:`Batch`; the one publish loop
(:mod:`connectors.publish`) sends its events and dead letters, waits for every
acknowledgement, and only then calls :meth:`Source.commit` with that batch,
which saves the batch's checkpoint (bytewax's ``snapshot``, taken at the
moment the state is known to be safe rather than at an epoch boundary).

Traps:

* **A source runs ahead of its commits.** With a bounded buffer between the
  source and the broker, ``next_batch`` is called again before the previous
  batch was acknowledged. A source must therefore keep its *read* position in
  memory and put the position to *save* on the batch (``state``), never save
  it itself. Commits arrive in batch order, one at a time.
* **Nothing new is not nothing to commit.** A batch of kernel noise publishes
  nothing but still moves the position (``state``): it goes through the
  buffer like any other, so its commit cannot overtake an earlier, unacked one.
  Only a batch with nothing at all (:attr:`Batch.idle` and no state) is dropped.
* **Event-time progress** (:attr:`Batch.progress`) is the event time up to
  which this source has delivered: the processor's watermark is made of it. The
  publish loop signs every raw record with the source's id and the progress
  acknowledged before it, and heartbeats it when the source is quiet
  (:class:`connectors.publish.Publisher`, :mod:`schemas.progress`); the
  processor's watermark is the least progress over the sources it has heard
  recently (:class:`streams.app.pipeline.Pipeline`). What it means per source:

  ========  ==========================================================================
  kmsg      the time of the last record read (boot time + its ``usec``)
  journal   the ``__REALTIME_TIMESTAMP`` of the last entry read
  file      the time of the last line that carried one (XID lines; others have none)
  dcgm      the scrape's time (the exposition's timestamp, else the poller's clock)
  nvml      the clock when the event was read (NVML gives no event time)
  k8s       the event time of the last event emitted (a watch is not ordered by event
            time, so this is a hint, not a bound: the processor's grace covers it)
  autoscal  the kubelet timestamp of the last log line read (several pods are followed
            at once, so also a hint); status ConfigMap updates claim nothing
  ========  ==========================================================================

  ``None`` means "no new information" (a batch of dead letters only, a record
  without a time): a consumer keeps the previous value, it does not go back.
  An *idle* batch (nothing read) of a live source says more: it has read
  everything there is, so the publish loop takes the wall clock as its progress
  (``PublishOptions.idle_is_caught_up``; off for a source replaying the past).
  The k8s watch reports idle batches only once every resource is listed: a
  relist under way is not caught up. Trap: a source that never reports idle
  (blocking in ``next_batch`` while quiet) holds every watermark at its last event;
  dcgm reports idle while it waits for its next scrape (its events are stamped with
  the scrape's time, read later than the claim), except after an exposition with its
  own timestamps, which may be older than now: then its progress trails by up to one
  scrape interval plus a heartbeat (:class:`connectors.dcgm.scrape.DcgmSource`).
  Whatever a quiet source claims reaches the processor with its next heartbeat: a
  quiet source's progress is up to ``heartbeat_seconds`` old, and so is every
  watermark that hears it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import msgspec

from schemas.codec import AnyEvent, RecordError
from schemas.dead_letters import DeadLetter


@dataclass(frozen=True)
class DeadLine:
    """A record that could not be used: its bytes, why, and its position (``seq``) if known.

    The light form a line-oriented source builds per bad line; the publish loop
    turns it into a :class:`~schemas.dead_letters.DeadLetter` with the source's
    :attr:`Source.name` as ``topic`` and :attr:`Source.key` as ``key``
    (:meth:`letter`). A source that knows more (k8s: the resource and the time
    observed; dcgm: the scrape) puts a ready ``DeadLetter`` on the batch instead.
    """

    raw: bytes
    error: RecordError
    seq: int | None

    def letter(self, origin: str, key: bytes | None) -> DeadLetter:
        """The dead-letter record: not a Kafka record, so ``partition`` -1, ``offset`` = seq."""
        return DeadLetter(
            topic=origin,
            partition=-1,
            offset=self.seq if self.seq is not None else -1,
            reason=self.error.reason,
            field=self.error.field,
            key=key,
            value=self.raw,
        )


@dataclass
class Batch:
    """What one read gave: events to publish, dead letters, the checkpoint to save after."""

    events: list[AnyEvent] = field(default_factory=list)
    dead: list[DeadLine | DeadLetter] = field(default_factory=list)
    state: msgspec.Struct | None = None
    """The checkpoint to save once everything above is acknowledged (``None``: nothing new)."""
    records: int = 0
    """Records read for this batch (including ones that publish nothing)."""
    progress: datetime | None = None
    """Event time up to which the source has delivered with this batch; see the module."""

    @property
    def idle(self) -> bool:
        """Nothing was read and nothing is to be published: time to wait for the source."""
        return not (self.records or self.events or self.dead)

    @property
    def empty(self) -> bool:
        """Nothing to send and nothing to commit: the publish loop drops it."""
        return self.state is None and not (self.events or self.dead)


class Source(Protocol):
    """A live source, as the publish loop (:class:`connectors.publish.Publisher`) uses it.

    ``next_batch`` waits (at most about a poll interval) for the next batch;
    an idle source returns an empty :class:`Batch` so the loop can check for a
    stop; ``None`` means the source has ended (``--once`` read everything, or
    its process died: the caller decides which). It may be cancelled at any
    await (on stop): a batch read but not yet returned is then simply not
    committed, and is read again by the next start.

    Implementations: ``connectors.xid.run.XidSource`` (kmsg, journal, file),
    ``connectors.dcgm.scrape.DcgmSource``, ``connectors.nvml.run.NvmlSource``,
    ``connectors.k8s.run.WatchSource``, ``connectors.autoscaler.run.AutoscalerLogSource``.
    """

    name: str
    """Where its dead lines say they came from (``kmsg:/dev/kmsg``, ``journal``...)."""
    key: bytes | None
    """The key of its dead lines (the node's correlation key), or None."""

    async def next_batch(self) -> Batch | None: ...

    def commit(self, batch: Batch) -> None:
        """Save ``batch.state``: called once its events and dead letters are acknowledged."""
        ...

    async def close(self) -> None: ...


def dead_letters(
    source_name: str, key: bytes | None, dead: Sequence[DeadLine | DeadLetter]
) -> list[DeadLetter]:
    """Every dead record of a batch as a :class:`DeadLetter` (see :meth:`DeadLine.letter`)."""
    return [d.letter(source_name, key) if isinstance(d, DeadLine) else d for d in dead]
