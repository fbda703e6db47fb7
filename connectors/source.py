"""One shape for every live source: an async stream of batches, each with its checkpoint.

Modelled on bytewax's ``StatefulSourcePartition``, adapted to "commit after delivery": a
:class:`Source` hands out a :class:`Batch`, the one publish loop (:mod:`connectors.publish`)
sends it, waits for every acknowledgement, and only then calls :meth:`Source.commit`.
:attr:`Batch.progress` is the event time the source has delivered up to: the processor's
watermark is made of it.

Traps: a source runs ahead of its commits, so it keeps its read position in memory and puts
the position to save on the batch; a batch that publishes nothing still moves the position
and goes through the buffer; ``None`` progress means no news, not going back; a live source
must report idle batches, or it holds every watermark at its last event. What progress
means per source: docs/connectors.md, design notes: connectors/source.py.
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

    Implementations: ``XidSource`` (kmsg, journal, file), ``DcgmSource``, ``NvmlSource``,
    ``WatchSource``, ``AutoscalerLogSource`` (each in its ``connectors`` package).

    Optional, read by :func:`liveness`: a node agent's ``family`` (``SOURCE_FAMILIES``) and
    ``read_at() -> datetime | None``, so its heartbeats say it is alive (``Tick.source``).
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


def liveness(source: object) -> tuple[str, datetime | None]:
    """``(family, read_at)`` a node source's heartbeats carry; ``("", None)``: progress only.

    ``family``: the source's optional ``family`` attribute (a cluster-wide source has none).
    ``read_at``: its optional ``read_at()``, when it last read its input successfully. No
    such method means "reading whenever progressing" (a kernel-log reader blocked on a
    quiet node is reading): None, and the tick's time stands for it. Trap: a method that
    returns None means "never read successfully yet" (a dcgm-exporter that has refused
    every scrape): then the heartbeat vouches for progress only, no family, because a
    live source whose input fails still advances its progress (an idle batch).
    """
    family = getattr(source, "family", "")
    if not isinstance(family, str) or not family:
        return "", None
    reader = getattr(source, "read_at", None)
    if reader is None:
        return family, None
    read_at = reader()
    if not isinstance(read_at, datetime):
        return "", None
    return family, read_at
