"""From raw Kafka records to incidents, dead letters, state snapshots and acks.

The transport (:mod:`streams.app.worker`) hands in :class:`RawRecord`s in batches and gets
back a :class:`BatchOutcome` saying what to publish and what may be committed.
Nothing here does I/O or reads a clock, so every rule of the at-least-once
contract is testable without a broker:

* A record that does not decode, carries the wrong schema for its topic, or is
  keyed by something other than its correlation key becomes a
  :class:`~schemas.dead_letters.DeadLetter`; its token is released at once
  (once the dead letter is delivered, the record is done) and processing goes on.
* A good record's token is released only when the correlator has applied it
  (events wait for the watermark): the transport must publish the outcome's
  incidents and the state snapshots taken after the release, await their acks,
  and only then acknowledge the released tokens. Deterministic incident ids
  make the redelivery after a crash harmless, and the core skips events it had
  already applied (``stats.stale``).
* An exception inside the core (a bug) costs one record, which goes to the
  dead-letter topic with the exception as its reason; the worker lives on.
* A mismatched key matters because state is partitioned by key: a record on the
  wrong partition would be processed by a worker that does not own its state.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from schemas.codec import AnyEvent, RecordError, try_decode_event
from schemas.dead_letters import DeadLetter
from schemas.events import Event, Tick
from schemas.incidents import Incident
from schemas.keys import correlation_key
from schemas.topics import SOURCE_SCHEMAS, TopicLayout
from streams.core import CoreConfig, Correlator
from streams.core.snapshot import encode_state

log = logging.getLogger("gputriage.processor")


def _where(record: RawRecord) -> tuple[str, int, int]:
    return record.topic, record.partition, record.offset


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One consumed record, as any Kafka client gives it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    token: Any = None
    """The transport's handle, released back once the record is done."""


@dataclass(slots=True)
class BatchOutcome:
    """What one batch (or tick) produced; the transport publishes it, then acks."""

    incidents: list[Incident] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    released: list[Any] = field(default_factory=list)
    """Tokens that may be acknowledged once the above is delivered, and the state
    they changed is written (:meth:`Pipeline.snapshots`)."""
    events_by_source: dict[str, int] = field(default_factory=dict)


Partition = tuple[str, int]
"""A topic and partition number."""


class Pipeline:
    """One worker's correlator and the checks in front of it.

    The watermark is per partition: a worker reads many topic-partitions at
    different speeds (a backlog on one, nothing on another), and letting the
    fastest one drive the watermark would make the others' events late, and
    then stale. So the watermark is the slowest *busy* partition's newest event
    time minus grace; a partition the transport reports as caught up (nothing
    left to read) does not hold it back, and when every partition is caught up
    the worker's clock (a tick) drives it.
    """

    def __init__(self, config: CoreConfig, layout: TopicLayout) -> None:
        self.correlator = Correlator(config, track_dirty=True)
        self.grace = config.grace_seconds
        self._newest: dict[Partition, float] = {}
        self._schemas: dict[str, tuple[str, type[Event]]] = {}
        for source, spec in layout.raw.items():
            self._schemas[spec.name] = (source, SOURCE_SCHEMAS[source])

    def process(
        self,
        records: Iterable[RawRecord],
        busy: Iterable[Partition] | None = None,
    ) -> BatchOutcome:
        """Decode and correlate a batch.

        ``busy``: the assigned partitions that still have records to read. None
        means none do: every partition was read to its end (a caller feeding one
        finite batch, as tests do), so the newest event time of all counts.
        """
        outcome = BatchOutcome()
        correlator = self.correlator
        counts = outcome.events_by_source
        newest = self._newest
        for record in records:
            event = self._decode(record, outcome)
            if event is None:
                continue
            source = self._schemas[record.topic][0]
            counts[source] = counts.get(source, 0) + 1
            where = (record.topic, record.partition)
            when = event.time.timestamp()
            if when > newest.get(where, -math.inf):
                newest[where] = when
            try:
                outcome.incidents += correlator.ingest(event, token=record.token, hold=True)
            except Exception as exc:  # a bug must cost one record, not the worker
                log.exception("correlating %s[%d]@%d failed", *_where(record))
                self._dead(record, outcome, RecordError(f"processing failed: {exc!r}"))
        self._advance(outcome, self._watermark(busy, None))
        return self._finish(outcome)

    def tick(self, now: float, busy: Iterable[Partition] = ()) -> BatchOutcome:
        """The worker's clock: with nothing left to read, quiet keys' timers fire."""
        outcome = BatchOutcome()
        self._advance(outcome, self._watermark(busy, now))
        return self._finish(outcome)

    def _advance(self, outcome: BatchOutcome, watermark: float) -> None:
        try:
            outcome.incidents += self.correlator.advance_watermark(watermark)
        except Exception:  # keep the worker alive; the log says what broke
            log.exception("advancing the watermark to %s failed", watermark)

    def _watermark(self, busy: Iterable[Partition] | None, now: float | None) -> float:
        newest = self._newest
        pending = [newest.get(p, -math.inf) for p in busy or ()]
        if pending:
            return min(pending) - self.grace
        if now is not None:
            return now - self.grace
        return max(newest.values(), default=-math.inf) - self.grace

    def restore(self, snapshots: Iterable[Any]) -> None:
        """Adopt states read back from the changelog (already decoded)."""
        for state in snapshots:
            self.correlator.restore(state)

    def snapshots(self) -> list[tuple[str, bytes]]:
        """``(correlation key, encoded state)`` of every key changed since the last call.

        Call it as rarely as durability allows: a key touched by a thousand events
        in between is written once. Tokens released before this call may be acked
        once these snapshots (and the incidents) are delivered, not before.
        """
        return [(key, encode_state(state)) for key, state in self.correlator.take_dirty()]

    def _finish(self, outcome: BatchOutcome) -> BatchOutcome:
        outcome.released += self.correlator.take_released()
        return outcome

    def _decode(self, record: RawRecord, outcome: BatchOutcome) -> AnyEvent | None:
        expected = self._schemas.get(record.topic)
        if expected is None:
            return self._dead(record, outcome, RecordError(f"not a raw topic: {record.topic}"))
        if record.value is None:
            return self._dead(record, outcome, RecordError("tombstone (null value)"))
        event = try_decode_event(record.value)
        if isinstance(event, RecordError):
            return self._dead(record, outcome, event)
        schema = type(event)
        if schema is Tick or schema is not expected[1]:
            got = schema.__struct_config__.tag
            want = expected[1].__struct_config__.tag
            return self._dead(
                record, outcome, RecordError(f"schema {got} on {record.topic} (expects {want})")
            )
        key = correlation_key(event)
        if record.key is None or record.key != key.encode():
            shown = record.key.decode(errors="replace") if record.key is not None else None
            return self._dead(
                record,
                outcome,
                RecordError(f"record key {shown!r} is not the correlation key {key!r}"),
            )
        return event

    @staticmethod
    def _dead(record: RawRecord, outcome: BatchOutcome, error: RecordError) -> None:
        outcome.dead_letters.append(
            DeadLetter(
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                reason=error.reason,
                field=error.field,
                key=record.key,
                value=record.value,
                timestamp_ms=record.timestamp_ms,
            )
        )
        if record.token is not None:
            outcome.released.append(record.token)
