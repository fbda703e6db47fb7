"""From raw Kafka records to incidents, dead letters, state snapshots and acks.

The transport (:mod:`streams.app.worker`) hands in :class:`RawRecord`s in batches and gets
back a :class:`BatchOutcome` saying what to publish and what may be committed. Nothing here
does I/O or reads a clock, so the at-least-once contract is testable without a broker.

Traps: a record that does not decode, has the wrong schema for its topic, or is keyed by
something else than its correlation key (state is partitioned by key) becomes a
:class:`~schemas.dead_letters.DeadLetter`, its token released at once; a good record's
token is released only once the correlator applied it, and the transport must publish the
incidents and snapshots taken after that and await their acks before acknowledging; an
exception inside the core costs one record (dead-lettered with the reason), never the
worker. docs/operations.md, design notes: the pipeline's contract.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from schemas import progress as wire
from schemas.codec import AnyEvent, RecordError, try_decode_event
from schemas.dead_letters import DeadLetter
from schemas.events import Event, Tick
from schemas.incidents import Incident
from schemas.keys import correlation_key
from schemas.timeconv import to_seconds
from schemas.topics import SOURCE_SCHEMAS, TopicLayout
from streams.app.lanes import Lanes
from streams.core import CoreSettings, Correlator
from streams.core.snapshot import encode_state
from streams.core.state import KeyState

log = logging.getLogger("gputriage.processor")


def _where(record: Any) -> tuple[str, int, int]:
    return record.topic, record.partition, record.offset


def _partition_of(record: RawRecord) -> tuple[str, int]:
    return record.topic, record.partition


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
    headers: Sequence[tuple[str, bytes]] = ()
    """The record's headers as aiokafka gives them (the source's progress among them)."""


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

LENDABLE = 512
"""Rises of a source's progress kept for :meth:`Pipeline.spread` (a few seconds of a busy
source's chunks; a partition caught up before the oldest kept simply lends nothing)."""


SourceStream = tuple[bytes, str, int]
"""A source id and a topic-partition it publishes to: one entry of the source table."""


class Pipeline:
    """One worker's correlators and the checks in front of them.

    A watermark per lane (a raw partition number, :mod:`streams.app.lanes`), made of the
    sources' signed progress: the least progress over the sources alive on the lane's
    partitions, minus grace, so live equals replay however fast events arrive. Records without
    progress headers keep the older rule (the slowest busy partition); when every source has
    aged out, the clock drives, as a limit, never a promise.

    Traps: no clock in here (the transport passes ``now``); a malformed header is no header,
    never a lost record; the watermark never goes back; an ended source (``+inf``) holds
    nothing; a partition a source has not used yet is unknown, so sources announce it first;
    a quiet source delays incidents by up to its heartbeat; a busy source's rarely used
    partition is lent its later progress (:meth:`spread`). In full: docs/detection.md, design
    notes: the worker's watermark.
    """

    def __init__(
        self,
        config: CoreSettings,
        layout: TopicLayout,
        *,
        source_idle_seconds: float = 60.0,
        max_future_seconds: float = 600.0,
    ) -> None:
        self.lanes = Lanes(config)
        """A correlator per raw partition number (see the class)."""
        self.grace = config.grace_seconds
        self.source_idle_seconds = source_idle_seconds
        self.max_future_seconds = max_future_seconds
        """How far ahead of the present an event time may be (see :meth:`_present`)."""
        self._newest: dict[Partition, float] = {}
        """Newest event time read per partition, every record (the busy rule)."""
        self._unsigned_newest: dict[int, float] = {}
        """Lane -> newest event time of its records without progress headers (their batch
        rule)."""
        self._sources: dict[SourceStream, list[float]] = {}
        """(source, topic, partition) -> [progress, last heard]; progress -inf: none yet."""
        self.malformed_headers = 0
        """Records whose progress headers could not be read (treated as header-less)."""
        self._progress_of: dict[bytes, float] = {}
        """Progress header values already read (see :meth:`_hear`)."""
        self._checked: set[bytes] = set()
        """Source ids already found well-formed."""
        self._owned: frozenset[Partition] | None = None
        """The assigned raw partitions (:meth:`retain`); None: no assignment known."""
        self._announced: dict[SourceStream, float] = {}
        """Entries added by an announcement, not heard yet -> when (``now``) it was read."""
        self._lendable: dict[bytes, tuple[list[float], list[float]]] = {}
        """Source -> (when read, progress): each rise of its finite progress on any
        partition, both ascending, the last ``LENDABLE`` kept; what :meth:`spread` lends
        its other partitions."""
        self.monitoring_resolution_seconds = config.monitoring_resolution_seconds
        """How finely the core keeps when a node's monitoring source was last heard: a
        heartbeat in a bucket already forwarded changes nothing there (:meth:`_heard`)."""
        self._heard: dict[tuple[str, str, str, int], int] = {}
        """(cluster, node, source family, lane) -> the last bucket of ``heard`` forwarded."""
        self._silent_buckets = math.ceil(
            config.monitoring_silence_seconds / config.monitoring_resolution_seconds
        )
        self._newest_heard = -math.inf
        """The newest bucket forwarded: the present of :meth:`_forget_heard`."""
        self._heard_kept = 0
        """Entries kept by the last :meth:`_forget_heard` (it runs again at twice as many)."""
        self.heard_limit = 4096
        """How many entries of ``_heard`` are let grow before the ones silent for longer than
        ``monitoring_silence_seconds`` are forgotten (:meth:`_forget_heard`)."""
        self._schemas: dict[str, tuple[str, type[Event]]] = {}
        for source, spec in layout.raw.items():
            self._schemas[spec.name] = (source, SOURCE_SCHEMAS[source])

    def process(
        self,
        records: Iterable[RawRecord],
        busy: Iterable[Partition] | None = None,
        now: float | None = None,
    ) -> BatchOutcome:
        """Decode and correlate a batch.

        ``busy``: the assigned partitions that still have records to read. None
        means none do: every partition was read to its end (a caller feeding one
        finite batch, as tests do), so the newest event time of all counts.
        ``now``: the wall clock, for when the sources were heard (see the class).
        """
        outcome = BatchOutcome()
        latest = self._latest(now)
        # Runs of one partition, in the order given: what is per partition is done per run.
        for (topic, partition), run in groupby(records, _partition_of):
            self._run(topic, partition, run, None, outcome, now, latest)
        self._advance(outcome, self._watermarks(busy, None, now))
        return self._finish(outcome)

    def process_fetched(
        self,
        fetched: Mapping[Any, Sequence[Any]],
        busy: Iterable[Partition] | None = None,
        now: float | None = None,
    ) -> BatchOutcome:
        """:meth:`process` for records as aiokafka's ``getmany`` gives them:
        ``{TopicPartition: [ConsumerRecord, ...]}``; each record's token is
        ``(its TopicPartition, its offset)``. ``busy`` and ``now`` as for :meth:`process`.

        Why a second entry: the same work without a :class:`RawRecord` per record. A
        frozen dataclass's ``__init__`` goes through ``object.__setattr__`` for each of
        its eight fields (~1.1 us a record, measured: a twentieth of the worker's whole
        per-record budget); here a record is read where it lies, and a ``RawRecord`` is
        built only for a dead letter. Anything with aiokafka's record attributes
        (``topic``, ``partition``, ``offset``, ``key``, ``value``, ``timestamp``,
        ``headers``) will do as a record; the mapping's keys are only handed back.
        """
        outcome = BatchOutcome()
        latest = self._latest(now)
        for tp, batch in fetched.items():
            if batch:
                first = batch[0]
                self._run(first.topic, first.partition, batch, tp, outcome, now, latest)
        self._advance(outcome, self._watermarks(busy, None, now))
        return self._finish(outcome)

    def _latest(self, now: float | None) -> float:
        """The latest event time accepted (see :meth:`_present`); ``inf``: no bound."""
        present = self._present(now)
        return present + self.max_future_seconds if present > -math.inf else math.inf

    def _run(
        self,
        topic: str,
        partition: int,
        records: Iterable[Any],
        tp: Any,
        outcome: BatchOutcome,
        now: float | None,
        latest: float,
    ) -> None:
        """Decode and ingest a run of records of one topic-partition, in the order read.

        ``tp``: the token of a record is ``(tp, its offset)``; None: the record's own
        ``token`` (a :class:`RawRecord`).

        Why by run: the topic's schema and source, the lane's correlator and the partition's
        newest event time are looked up once a run, and the happy path is inline (the rest takes
        :meth:`_refuse`); a record signed with the pair just heard on this partition skips
        :meth:`_hear`, which would change nothing. Trap: what is decided per record must not
        change (order, dead letters, newest event time); a pair that announces partitions is
        heard each time. docs/operations.md, design notes: `Pipeline._run`.
        """
        expected = self._schemas.get(topic)
        if expected is None:
            error = RecordError(f"not a raw topic: {topic}")
            for record in records:
                self._dead(
                    record, record.token if tp is None else (tp, record.offset), outcome, error
                )
            return
        source, schema = expected
        # The lane is made by the first record ingested (or a heartbeat), as it always was:
        # a run of dead letters alone must not start a lane whose watermark could then move.
        correlator: Correlator | None = None
        hear = self._hear
        refuse = self._refuse
        taken = 0
        top = -math.inf
        unsigned_top = -math.inf
        found: list[Incident] = []
        heard: Any = None  # the headers last heard in this run, when canonical
        for record in records:
            token = record.token if tp is None else (tp, record.offset)
            headers = record.headers
            if not headers:
                signed = False
            elif headers == heard:
                signed = True  # the chunk's pair again: hearing it again changes nothing
            else:
                signed = hear(record, now)
                heard = headers if signed and len(headers) == 2 else None
            value = record.value
            event = try_decode_event(value) if value is not None else None
            if type(event) is not schema:
                refuse(record, token, outcome, signed, event, latest)
                continue
            key = record.key
            if key is None or key != correlation_key(event).encode():
                refuse(record, token, outcome, signed, event, latest)
                continue
            when = to_seconds(event.time)
            if when > latest:
                self._dead(record, token, outcome, self._too_far_ahead(event, latest))
                continue
            taken += 1
            if when > top:  # noqa: PLR1730  (a comparison, not a call, per record)
                top = when
            if not signed and when > unsigned_top:
                unsigned_top = when
            if correlator is None:
                correlator = self.lanes.lane(partition)
            try:
                found = correlator.ingest(event, token=token, hold=True)
            except Exception as exc:  # a bug must cost one record, not the worker
                log.exception("correlating %s[%d]@%d failed", *_where(record))
                self._dead(record, token, outcome, RecordError(f"processing failed: {exc!r}"))
                continue
            if found:
                outcome.incidents += found
        if taken:
            counts = outcome.events_by_source
            counts[source] = counts.get(source, 0) + taken
            where = (topic, partition)
            newest = self._newest
            if top > newest.get(where, -math.inf):
                newest[where] = top
            unsigned = self._unsigned_newest
            if unsigned_top > unsigned.get(partition, -math.inf):
                unsigned[partition] = unsigned_top

    def _present(self, now: float | None) -> float:
        """The present: the worker's clock; without one (a caller feeding batches with
        no clock), the furthest progress a source has vouched for; -inf when neither is
        known, and then nothing is refused. Not the sources' progress when there is a
        clock: one source with a wrong clock would vouch for its own far-future records.

        Why a bound at all: a valid record dated 9999-12-31 (a node whose
        clock went wrong, a typo in a hand-made file) waits for a watermark that never
        comes, and the commit of its partition stops behind it forever, at every
        restart. Further than ``max_future_seconds`` ahead of the present, it is a
        dead letter with that reason (clamping it would invent a time).
        """
        if now is not None:
            return now
        return max((entry[0] for entry in self._sources.values()), default=-math.inf)

    def _too_far_ahead(self, event: AnyEvent, latest: float) -> RecordError:
        ahead = to_seconds(event.time) - (latest - self.max_future_seconds)
        return RecordError(
            f"event time {event.time.isoformat()} is {ahead:.0f} s ahead of the present "
            f"(max_future_seconds = {self.max_future_seconds:g})",
            "$.time",
        )

    def tick(self, now: float, busy: Iterable[Partition] = ()) -> BatchOutcome:
        """The worker's clock: with nothing left to read, quiet keys' timers fire."""
        outcome = BatchOutcome()
        self._advance(outcome, self._watermarks(busy, now, now))
        return self._finish(outcome)

    @property
    def clock_limit(self) -> float:
        """:meth:`Lanes.clock_limit`: how far the clock last fired every lane, if it did."""
        return self.lanes.clock_limit()

    def _advance(self, outcome: BatchOutcome, watermarks: Mapping[int, tuple[float, bool]]) -> None:
        outcome.incidents += self.lanes.advance(watermarks)

    def _hear(self, record: Any, now: float | None) -> bool:
        """Note the record's source progress; False if it has none (or a malformed one).

        Per record, so it is kept cheap: the publish loop's canonical pair of headers is
        read without :func:`schemas.progress.read`'s generality, through a small cache of
        the progress values and source ids already checked (a chunk shares one progress,
        a worker hears a bounded set of sources); anything else takes the general path.
        """
        headers = record.headers
        fast: tuple[bytes, float] | None = None
        if len(headers) == 2:
            (first, source), (second, value) = headers
            if first == wire.SOURCE_HEADER and second == wire.PROGRESS_HEADER:
                cached = self._progress_of.get(value)
                if cached is not None and source in self._checked:
                    fast = (source, cached)
        if fast is None:
            got = wire.read(headers)
            if got is None:
                return False
            if isinstance(got, str):
                self.malformed_headers += 1
                return False
            self._remember(headers, got)
            fast = got
            if len(headers) > 2 and self._owned is not None and now is not None:
                self._note_announced(got[0], wire.read_partitions(headers), now)
        source, progress = fast
        key = (source, record.topic, record.partition)
        entry = self._sources.get(key)
        heard = -math.inf if now is None else now
        if progress == math.inf or (entry is not None and entry[0] == math.inf):
            # An end, or a run after one: the old run's progress is nobody's to lend.
            self._lendable.pop(source, None)
        if -math.inf < progress < math.inf:
            lendable = self._lendable.get(source)
            if lendable is None:
                self._lendable[source] = ([heard], [progress])
            elif progress > lendable[1][-1] and heard >= lendable[0][-1]:
                times, values = lendable
                if len(times) >= LENDABLE:
                    del times[: LENDABLE // 2], values[: LENDABLE // 2]
                times.append(heard)
                values.append(progress)
        if self._announced:
            self._announced.pop(key, None)
        if entry is None:
            self._sources[key] = [progress, heard]
            return True
        if entry[0] == math.inf:
            # An ended source that publishes again has restarted: its new run's records
            # follow the end on this partition, so they replace it.
            entry[0] = progress
        elif progress > entry[0]:
            entry[0] = progress
        entry[1] = max(entry[1], heard)
        return True

    def _note_announced(self, source: bytes, partitions: frozenset[Partition], now: float) -> None:
        """Hold the watermark for the owned partitions a source announces and has not been
        heard on here (see the class); the record's own partition is noted by the caller."""
        owned = self._owned or frozenset()
        for topic, partition in partitions:
            key = (source, topic, partition)
            if (topic, partition) in owned and key not in self._sources:
                self._sources[key] = [-math.inf, now]
                self._announced[key] = now

    @property
    def has_announced(self) -> bool:
        """Whether an unheard announcement holds the watermark (cheap, per batch)."""
        return bool(self._announced)

    def announced(self) -> dict[Partition, float]:
        """The partitions an unheard announcement holds -> when the earliest was read."""
        out: dict[Partition, float] = {}
        for (_, topic, partition), at in self._announced.items():
            where = (topic, partition)
            out[where] = min(at, out.get(where, math.inf))
        return out

    def spread(self, caught_up: Mapping[Partition, float]) -> None:
        """Lend each source's greatest progress to its partitions read to an end since.

        ``caught_up``: partition -> a moment (epoch s, the worker's clock) such that every
        record written there before it has been read (:meth:`Worker._caught_up`).

        Safe because a source signs a chunk with the progress of batches acknowledged before it,
        on every partition: once progress *P* has been read, a partition read to an end fetched
        after that holds none of its records unread. Without it a busy source's rarely written
        partition holds every incident at its last record's progress (busy sources never
        heartbeat).

        Traps: only entries this worker heard, never past an end, never back; it assumes a
        chunk's events are no older than its progress less the grace; the busy rule is not lent
        anything. docs/detection.md, design notes: `Pipeline.spread`.
        """
        lendable = self._lendable
        announced = self._announced
        for key, entry in self._sources.items():
            where = (key[1], key[2])
            at = caught_up.get(where)
            if at is None:
                continue
            rises = lendable.get(key[0])
            if rises is not None and entry[0] < math.inf and key not in announced:
                # The greatest progress read strictly before ``at``.
                index = bisect_left(rises[0], at) - 1
                if index >= 0 and rises[1][index] > entry[0]:
                    entry[0] = rises[1][index]
                    entry[1] = max(entry[1], rises[0][index])

    def settle(self, partitions: Iterable[Partition]) -> None:
        """The worker has read these to an end fetched after their announcements: what the
        announcing sources had published there is read (or was committed before this
        worker started), so an entry still unheard holds nothing."""
        done = set(partitions)
        for key in [k for k in self._announced if (k[1], k[2]) in done]:
            del self._announced[key]
            entry = self._sources.get(key)
            if entry is not None and entry[0] == -math.inf:
                del self._sources[key]

    def _remember(self, headers: Sequence[tuple[str, bytes]], got: tuple[bytes, float]) -> None:
        """Cache a well-formed pair for :meth:`_hear`'s fast path (bounded: reset when full)."""
        for name, value in headers:
            if name == wire.PROGRESS_HEADER:
                if len(self._progress_of) >= 4096:
                    self._progress_of.clear()
                self._progress_of[value] = got[1]
        if len(self._checked) >= 65_536:
            self._checked.clear()
        self._checked.add(got[0])

    def _alive(
        self, now: float | None, busy: Iterable[Partition]
    ) -> Iterable[tuple[SourceStream, float]]:
        """``(entry, progress)`` of every source entry alive at ``now`` (all, without it)."""
        if now is None:
            return ((key, entry[0]) for key, entry in self._sources.items())
        oldest = now - self.source_idle_seconds
        held = set(busy)
        return (
            (key, entry[0])
            for key, entry in self._sources.items()
            if entry[1] >= oldest or (key[1], key[2]) in held
        )

    def _watermarks(
        self, busy: Iterable[Partition] | None, clock: float | None, now: float | None
    ) -> dict[int, tuple[float, bool]]:
        """Lane -> ``(watermark, from the clock)``, for every lane; the second is True when
        only the worker's clock bounds it (nothing of the lane busy, no alive source of the
        lane below it), and then it is a limit for
        :meth:`Correlator.advance_watermark`'s ``tight`` mode, not a promise.

        One pass over the busy partitions and one over the source table, whatever the
        number of lanes: this runs after every batch and every tick."""
        newest = self._newest
        busy = list(busy or ())
        pending: dict[int, float] = {}
        for where in busy:
            at = newest.get(where, -math.inf)
            if at < pending.get(where[1], math.inf):
                pending[where[1]] = at
        least: dict[int, float] = {}
        if self._sources:
            for key, progress in self._alive(now, busy):
                if progress < least.get(key[2], math.inf):
                    least[key[2]] = progress
        unsigned = self._unsigned_newest
        out: dict[int, tuple[float, bool]] = {}
        for number, _ in self.lanes:
            # The partition rule (records without progress headers, and the start-up hold).
            from_clock = False
            low = pending.get(number)
            if low is None:
                if clock is not None:
                    low, from_clock = clock, True
                else:  # inf without a record lacking progress: no bound from this rule
                    low = unsigned.get(number, math.inf)
            sourced = least.get(number, math.inf)
            if sourced < low:
                low, from_clock = sourced, False
            out[number] = (-math.inf, False) if low == math.inf else (low - self.grace, from_clock)
        return out

    def ahead(self, busy: Iterable[Partition], now: float | None = None) -> set[Partition]:
        """The busy partitions that do not hold their lane's watermark back: reading more of
        them only buffers more (the worker pauses them while the buffer is full).

        A partition's place in event time is the least of what it gives the watermark
        rules (:meth:`_watermarks`): its newest event time (it is busy) and the progress
        of every alive source heard on it. The least place over those and every alive
        source heard elsewhere in the lane holds the lane's watermark; the partitions *at*
        it are never in the result, so whoever holds a lane is always read, and it moves.
        """
        newest = self._newest
        place = {p: newest.get(p, -math.inf) for p in busy}
        if not place:
            return set()
        low: dict[int, float] = {}
        for (_, number), at in place.items():
            if at < low.get(number, math.inf):
                low[number] = at
        if self._sources:
            for (_, topic, partition), progress in self._alive(now, place):
                where = (topic, partition)
                if where in place and progress < place[where]:
                    place[where] = progress
                if progress < low.get(partition, math.inf):
                    low[partition] = progress
        return {p for p, at in place.items() if at > low[p[1]]}

    def sources(self, now: float, busy: Iterable[Partition] = ()) -> tuple[int, int]:
        """``(alive, idle)``: source ids heard on some partition within the idle timeout,
        and the others: heard only longer ago, or ended (the ``gputriage_sources_*`` gauges)."""
        alive = {key[0] for key, progress in self._alive(now, busy) if progress < math.inf}
        known = {key[0] for key in self._sources}
        return len(alive), len(known - alive)

    def retain(self, partitions: Iterable[Partition]) -> int:
        """Forget what this worker knew of the partitions no longer assigned (after a
        rebalance): their lanes with the events they buffered (returns how many: never
        released, their new owner reads them again), their source entries (never heard
        here again, they would hold a watermark until aged) and their newest event times
        (a partition that comes back must hold its lane from its own backlog, not from
        what this worker read there before it lost it)."""
        keep = frozenset(partitions)
        self._owned = keep
        for key in [k for k in self._sources if (k[1], k[2]) not in keep]:
            del self._sources[key]
            self._announced.pop(key, None)
        for where in [w for w in self._newest if w not in keep]:
            del self._newest[where]
        numbers = {number for _, number in keep}
        for number in [n for n in self._unsigned_newest if n not in numbers]:
            del self._unsigned_newest[number]
        for subject in [s for s in self._heard if s[3] not in numbers]:
            del self._heard[subject]
        return self.lanes.keep(numbers)

    def restore(self, snapshots: Iterable[KeyState], lane: int) -> None:
        """Adopt states read back from the state topic's partition ``lane`` (decoded)."""
        self.lanes.restore(snapshots, lane)

    def snapshots(self) -> list[tuple[str, bytes, int]]:
        """``(correlation key, encoded state, lane)`` of every key changed since the last
        call; the state belongs on the state topic's partition ``lane``.

        Call it as rarely as durability allows: a key touched by a thousand events
        in between is written once. Tokens released before this call may be acked
        once these snapshots (and the incidents) are delivered, not before.
        """
        return [(key, encode_state(state), lane) for key, state, lane in self.lanes.take_dirty()]

    def _finish(self, outcome: BatchOutcome) -> BatchOutcome:
        outcome.released += self.lanes.take_released()
        return outcome

    def _refuse(
        self,
        record: Any,
        token: Any,
        outcome: BatchOutcome,
        signed: bool,
        event: Any,
        latest: float = math.inf,
    ) -> None:
        """A record off the happy path of :meth:`_run` (``event``: what its value decoded
        to, a :class:`RecordError`, or None for a tombstone): a heartbeat (its progress is
        noted, a node source's is handed to the core, :meth:`_heard`; it is done), or a
        dead letter saying why."""
        if event is None:
            return self._dead(record, token, outcome, RecordError("tombstone (null value)"))
        if isinstance(event, RecordError):
            return self._dead(record, token, outcome, event)
        schema = type(event)
        if schema is Tick:
            if not signed:
                error = RecordError(f"tick.v1 on {record.topic} without progress")
                return self._dead(record, token, outcome, error)
            correlator = self.lanes.lane(record.partition)  # its lane's watermark moves with it
            try:
                self._heard_from(event, record.partition, correlator, outcome, latest)
            except Exception as exc:  # a bug must cost one record, not the worker
                log.exception("correlating %s[%d]@%d failed", *_where(record))
                error = RecordError(f"processing failed: {exc!r}")
                return self._dead(record, token, outcome, error)
            if token is not None:  # a heartbeat: its progress is noted, it is done
                outcome.released.append(token)
            return None
        expected = self._schemas[record.topic][1]
        if schema is not expected:
            got = schema.__struct_config__.tag
            want = expected.__struct_config__.tag
            error = RecordError(f"schema {got} on {record.topic} (expects {want})")
            return self._dead(record, token, outcome, error)
        key = correlation_key(event)
        shown = record.key.decode(errors="replace") if record.key is not None else None
        error = RecordError(f"record key {shown!r} is not the correlation key {key!r}")
        return self._dead(record, token, outcome, error)

    def _heard_from(
        self, tick: Tick, lane: int, correlator: Correlator, outcome: BatchOutcome, latest: float
    ) -> None:
        """Hand a node source's heartbeat (``node`` and ``source`` set) to the core, which
        records when it last heard that source of that node (``monitoring_gap``).

        Only when ``floor(heard / monitoring_resolution_seconds)`` rose for that node's
        source in this lane (heard: ``read_at``, else ``time``): the core keeps no finer, so
        a heartbeat every half second costs one ingest per bucket. Per lane, because a
        source heartbeats to every partition it used (its node key's, and the cluster key's
        for routed copies) and only the lane holding the node's key can use it. The token
        stays the pipeline's (``token=None``): the core must neither hold nor release it.
        Traps: a heard time past the present's bound (a node clock gone wrong) is not
        forwarded, it would hide the source's silence; a progress-only tick never is.
        """
        if not (tick.node and tick.source):
            return
        heard = to_seconds(tick.read_at or tick.time)
        if not heard <= latest:
            return
        bucket = math.floor(heard / self.monitoring_resolution_seconds)
        subject = (tick.cluster, tick.node, tick.source, lane)
        if bucket <= self._heard.get(subject, -math.inf):
            return
        outcome.incidents += correlator.ingest(tick, token=None, hold=True)
        heard_buckets = self._heard
        heard_buckets[subject] = bucket
        self._newest_heard = max(self._newest_heard, bucket)
        if len(heard_buckets) > max(self.heard_limit, 2 * self._heard_kept):
            self._forget_heard()

    def _forget_heard(self) -> None:
        """Forget the sources last forwarded longer than ``monitoring_silence_seconds``
        before the newest one: a node gone (Karpenter churn names thousands a day) or an
        agent silent that long. Why it is safe: forgetting only costs one more forward,
        the next time that source beats (the core keeps the greatest ``heard``). Run when
        the table doubles, so amortized O(1) a forward; no clock (the newest bucket is
        the present)."""
        oldest = self._newest_heard - self._silent_buckets
        heard_buckets = self._heard
        for subject in [s for s, bucket in heard_buckets.items() if bucket < oldest]:
            del heard_buckets[subject]
        self._heard_kept = len(heard_buckets)

    @property
    def heard_sources(self) -> int:
        """Node sources whose last forwarded heartbeat bucket is remembered (bounded)."""
        return len(self._heard)

    @staticmethod
    def _dead(record: Any, token: Any, outcome: BatchOutcome, error: RecordError) -> None:
        """A dead letter for ``record`` (a :class:`RawRecord` or an aiokafka record: the
        Kafka timestamp is ``timestamp_ms`` on the first, ``timestamp`` on the second)."""
        stamp = record.timestamp_ms if isinstance(record, RawRecord) else record.timestamp
        outcome.dead_letters.append(
            DeadLetter(
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                reason=error.reason,
                field=error.field,
                key=record.key,
                value=record.value,
                timestamp_ms=stamp,
            )
        )
        if token is not None:
            outcome.released.append(token)
