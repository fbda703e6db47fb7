"""The processor worker: raw topics in, incidents out, key state in a compacted topic.

One aiokafka consumer group reads every raw topic (co-partitioned by correlation key) in
``getmany`` batches into a :class:`~streams.app.pipeline.Pipeline`; the clock ticks it
between batches so quiet keys' windows still close. At-least-once: each flush sends the
changed key states, awaits every send, and only then commits up to each partition's lowest
unreleased record (:mod:`streams.app.group`); copies after a crash are suppressed by
:mod:`streams.app.published`. Not faust: a plain consumer was ~10x faster here.

Traps: on an eager rebalance, seek the kept partitions to our own read position (else
buffered records are ingested twice); aiokafka swallows the listener's exceptions, so a
failed restore is raised by the main loop; one lock keeps a batch and a callback apart; an
assignment that is not co-partitioned is refused; pausing is ``getmany`` naming partitions,
not ``pause()``, and the buffer cap is soft. In full: docs/operations.md, design notes: the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from connectors.health import fetched_ago
from schemas.codec import encode
from schemas.dead_letters import DeadLetter
from schemas.topics import STATE_RECORD_MAX_BYTES, TopicLayout, TopicSpec
from streams.app import dead_letters
from streams.app.announced import Receipts
from streams.app.changelog import ChangelogReader
from streams.app.group import Listener, commit, committable, group_consumer
from streams.app.metrics import Metrics
from streams.app.offsets import PartitionOffsets
from streams.app.pipeline import BatchOutcome, Partition, Pipeline
from streams.app.published import REFRESH_SECONDS, Offsets, Published, encode_mark, mark_key
from streams.app.settings import ProcessorSettings
from streams.core import CoreSettings

log = logging.getLogger("gputriage.processor")

RESUME_AT = 0.8
"""Paused partitions resume when the buffer falls below this share of the cap."""
MAX_REQUEST_BYTES = STATE_RECORD_MAX_BYTES
"""The producer's largest record (aiokafka's ``max_request_size``; see ``Worker.__init__``):
the state topic's ``max.message.bytes`` (:data:`schemas.topics.STATE_RECORD_MAX_BYTES`)."""
PREFETCH_BACKOFF_SECONDS = 0.002
"""aiokafka's fetcher's ``prefetch_backoff`` (0.1 s by default; see :meth:`Worker._tune`)."""


class Worker:
    """One processor worker: a consumer group member around one :class:`Pipeline`."""

    def __init__(
        self,
        core: CoreSettings,
        client_kwargs: Mapping[str, Any],
        layout: TopicLayout,
        state: TopicSpec,
        options: ProcessorSettings,
        metrics: Metrics | None = None,
    ) -> None:
        self.options = options
        self.layout = layout
        self.metrics = metrics or Metrics()
        self.pipeline = new_pipeline(core, layout, options)
        self.state_topic = state.name
        self.partitions = state.partitions
        self._raw_names = frozenset(layout.raw_topics)
        self.consumer = group_consumer(
            client_kwargs,
            group_id=options.app_id,
            session_timeout_seconds=options.session_timeout_seconds,
            rebalance_timeout_ms=int(options.rebalance_timeout_seconds * 1000),
            fetch_max_wait_ms=options.fetch_max_wait_ms,
            max_partition_fetch_bytes=4 << 20,
            # Co-partitioning: partition n of *every* raw topic must go to the same
            # worker (it holds the state of the keys hashed to n). The range assignor
            # does that when all topics have the same partition count; round-robin
            # (aiokafka's default) spreads topic-partitions and splits a key's signals.
            partition_assignment_strategy=(RangePartitionAssignor,),
        )
        self.producer = AIOKafkaProducer(
            **client_kwargs,
            acks="all",
            linger_ms=5,
            max_batch_size=1 << 20,
            # One key's state is one record, and the cluster-scoped key's grows with the
            # nodes (~1.06 MB at 2,000 nodes, measured): at aiokafka's default 1 MB the
            # send raised and the worker exited, at every restart.
            max_request_size=MAX_REQUEST_BYTES,
        )
        self.changelog = ChangelogReader(client_kwargs, state.name)
        self.published = Published(
            client_kwargs, layout.incidents.name, layout.incidents.partitions
        )
        self._marks: dict[int, Offsets] = {}
        """Raw partition -> the mark last written for it (written again only when it moves)."""
        self._suppressed_told = 0
        """``published.suppressed`` as last logged."""
        self._lock = asyncio.Lock()
        self._offsets: dict[TopicPartition, PartitionOffsets] = {}
        self._owned: frozenset[int] = frozenset()
        self._assigned_at = _now()
        self._pending: list[asyncio.Future[Any]] = []
        self._delivering: asyncio.Task[None] | None = None
        """The last periodic flush's acks and commit, awaited off the loop (:meth:`_flush`)."""
        self._last_flush = _now()
        self._last_tick = 0.0
        self._fatal: BaseException | None = None
        self._stale_seen = 0
        self._late_applied_seen = 0
        self._late_told = 0
        self._malformed_seen = 0
        self._peak = 0
        self._paused: set[TopicPartition] = set()
        self._receipts = Receipts()
        self.metrics.buffered_cap.set(options.max_buffered_events)

    # -- running -------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; then flush, commit and leave the group."""
        await self.producer.start()
        try:
            await self.changelog.start()
            await self.published.start()
            await self.consumer.start()
            self._tune(self.consumer)
            self.consumer.subscribe(
                topics=list(self.layout.raw_topics),
                listener=Listener(self, self._lock, self._failed),
            )
            tick_ms = max(1, int(self.options.tick_seconds * 1000))
            while not stop.is_set():
                batches = await self.consumer.getmany(
                    *self._reading(), timeout_ms=tick_ms, max_records=self._batch_size()
                )
                if self._fatal is not None:
                    raise self._fatal
                async with self._lock:
                    if self._fatal is not None:  # set while we waited for the lock
                        raise self._fatal
                    await self._step(batches)
            async with self._lock:
                await self._flush()
        finally:
            await self._close()

    @staticmethod
    def _tune(consumer: AIOKafkaConsumer) -> None:
        """Let the fetcher ask again for a drained partition while others still hold
        fetched records.

        aiokafka fetches nothing from a broker while any of its partitions holds records fetched
        less than ``prefetch_backoff`` (0.1 s) ago; with the buffer full, every read of the
        partitions holding the watermark waited that out (~27% of a backlog's time in ``epoll``).
        2 ms keeps what the backoff is for and lets drained partitions be fetched at once.

        Trap: the consumer takes no such argument, so it is set on the fetcher after ``start``;
        a test checks the attribute exists, so a rename fails the test rather than silently
        slowing a backlog. docs/operations.md, design notes: `Worker._tune`.
        """
        fetcher = getattr(consumer, "_fetcher", None)
        if fetcher is not None and hasattr(fetcher, "_prefetch_backoff"):
            fetcher._prefetch_backoff = PREFETCH_BACKOFF_SECONDS
        else:  # pragma: no cover - an aiokafka without it: slower backlogs, same results
            log.warning("aiokafka's fetcher has no _prefetch_backoff: left at its default")

    async def _close(self) -> None:
        running, self._delivering = self._delivering, None
        if running is not None and not running.done():  # failing out: its commit is moot
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
        closings = (
            self.consumer.stop,
            self.changelog.stop,
            self.published.stop,
            self.producer.stop,
        )
        for closing in closings:
            try:
                await closing()
            except Exception:  # closing must close the rest
                log.exception("stopping %s failed", closing)

    async def _step(self, batches: Mapping[TopicPartition, list[Any]]) -> None:
        pipeline = self.pipeline
        # Once a loop, before anything reads the watermark: it also observes the fetch
        # receipts the announcements settle by (a receipt seen later only claims less).
        pipeline.spread(self._caught_up())
        newest = 0
        clock = time.time()
        if batches:
            offsets = self._offsets
            fetched = {}
            for tp, batch in batches.items():
                tracker = offsets.get(tp)
                if tracker is None or not batch:  # lost in a rebalance since the fetch
                    continue
                first, last = batch[0].offset, batch[-1].offset
                if last - first + 1 == len(batch):  # consecutive: no list of offsets
                    tracker.extend(range(first, last + 1))
                else:
                    tracker.extend([r.offset for r in batch])
                fetched[tp] = batch
                newest = max(newest, batch[-1].timestamp)
            if fetched:
                started = time.perf_counter()
                outcome = pipeline.process_fetched(fetched, self._busy(), clock)
                self.metrics.pipeline_seconds.inc(time.perf_counter() - started)
                await self._send(outcome, newest / 1000)
        if pipeline.has_announced:
            await self._settle_announced()
        now = _now()
        if now - self._last_tick >= self.options.tick_seconds:
            self._last_tick = now
            started = time.perf_counter()
            outcome = pipeline.tick(time.time(), self._busy())
            self.metrics.pipeline_seconds.inc(time.perf_counter() - started)
            await self._send(outcome, 0.0)
            self._observe_gauges()
        if now - self._last_flush >= self.options.snapshot_seconds:
            await self._flush(wait=False)
        self._bound_buffer()

    def _reading(self) -> list[TopicPartition]:
        """The partitions to take records from: all (none named) unless some are paused."""
        if not self._paused:
            return []
        return [tp for tp in self._offsets if tp not in self._paused]

    def _batch_size(self) -> int:
        """``batch_max``; while partitions are paused, ``batch_max`` split between the
        assigned raw partitions (each one read while full can overshoot by a batch)."""
        if not self._paused:
            return self.options.batch_max
        return max(1, self.options.batch_max // max(1, len(self._offsets)))

    def _bound_buffer(self) -> None:
        """Pause the partitions ahead of the watermark while the buffer is full."""
        cap = self.options.max_buffered_events
        buffered = self.pipeline.lanes.pending()
        metrics = self.metrics
        metrics.buffered.set(buffered)
        if buffered > self._peak:
            self._peak = buffered
            metrics.buffered_peak.set(buffered)
        paused = self._paused
        if buffered < cap * RESUME_AT:
            if paused:
                self._resume(paused)
            return
        if not paused and buffered < cap:
            return
        ahead = self.pipeline.ahead(self._busy(), time.time())
        keep = {tp for tp in self._offsets if (tp.topic, tp.partition) in ahead}
        if buffered < cap:  # between the marks: pause nothing new
            keep &= paused
        self._resume(paused - keep)
        new = keep - paused
        if new:
            paused |= new
            metrics.paused_partitions.set(len(paused))
            metrics.pauses.inc(len(new))

    def _resume(self, partitions: set[TopicPartition]) -> None:
        if not partitions:
            return
        self._paused -= partitions
        self.metrics.paused_partitions.set(len(self._paused))

    async def _send(self, outcome: BatchOutcome, newest: float) -> None:
        """Queue the outcome's records on the producer (this waits only while its buffer
        is full: backpressure), count them, and release the outcome's tokens."""
        metrics = self.metrics
        producer = self.producer
        pending = self._pending
        incidents_topic = self.layout.incidents.name
        published = self.published
        for incident in outcome.incidents:
            value = encode(incident)
            if published.already_held(incident.id, incident.revision, value):
                metrics.suppressed.inc()
                continue
            future = await producer.send(incidents_topic, value, incident.id.encode())
            metrics.observe_published(incident)  # past the check: once per resolved id
            labels = metrics.incidents_out.labels(incident.type, incident.severity, incident.status)
            future.add_done_callback(_on_incident_acked(labels, metrics, newest, published))
            pending.append(future)
        send_letter = partial(self._try_send, self.layout.dead_letters.name)
        dead_letters.queue(outcome.dead_letters, send_letter, metrics, pending)
        metrics.count_events(outcome.events_by_source)
        offsets = self._offsets
        last: Any = None
        release: Any = None
        for tp, offset in outcome.released:
            if tp is not last:  # runs of one partition: its tracker looked up once a run
                last = tp
                tracker = offsets.get(tp)
                release = tracker.release if tracker is not None else None
            if release is not None:
                release(offset)

    async def _try_send(self, topic: str, letter: DeadLetter) -> KafkaError | None:
        """Send and await one dead letter; the error instead of raising it."""
        try:
            await (await self.producer.send(topic, encode(letter), letter.key))
        except KafkaError as exc:
            return exc
        return None

    async def _flush(self, *, wait: bool = True) -> None:
        """Snapshot changed keys and queue them; once every send so far is acked, commit
        what they cover (:meth:`_deliver`).

        ``wait=False`` (the loop's periodic flush): the acks and commit are awaited in a task of
        their own, so the loop goes on reading and ticking (standing still for them cost
        latency); at most one such task at a time, so faster flushes are held to the broker's
        pace, one flush behind. ``wait=True`` (revocation, stop): the task in flight, then this.

        Traps: a failed task is the worker's failure, raised by the next flush or the main loop
        (``_fatal``), never lost; the offsets are taken *before* the snapshots, so they cover only
        records released by then. docs/operations.md, design notes: `Worker._flush`.
        """
        if self._fatal is not None:
            # A delivery failed (raised by a revocation's flush, say): its sends are
            # lost, so no later flush may commit the records they covered.
            raise self._fatal
        running, self._delivering = self._delivering, None
        if running is not None:
            try:
                await running  # raises what it failed with; done already at 1 flush a second
            except BaseException as exc:
                self._fatal = self._fatal or exc
                raise
        started = time.perf_counter()
        self._last_flush = _now()
        commits = committable(self._offsets)
        await self._send_batched(
            self.state_topic,
            ((key.encode(), data, lane) for key, data, lane in self.pipeline.snapshots()),
        )
        await self._write_marks()
        pending, self._pending = self._pending, []
        self.metrics.flush_seconds.inc(time.perf_counter() - started)
        if wait:
            await self._deliver(pending, commits)
            return
        task = asyncio.create_task(self._deliver(pending, commits), name="gputriage-commit")
        task.add_done_callback(self._delivered)
        self._delivering = task

    def _delivered(self, task: asyncio.Task[None]) -> None:
        """A background delivery ended: keep its failure for the main loop to raise."""
        if not task.cancelled() and task.exception() is not None and self._fatal is None:
            self._fatal = task.exception()

    async def _deliver(
        self, pending: list[asyncio.Future[Any]], commits: dict[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """Await every send in ``pending``, then commit ``commits`` (see :meth:`_flush`)."""
        if pending:
            await asyncio.gather(*pending)
        if self.published.suppressed != self._suppressed_told:
            self._suppressed_told = self.published.suppressed
            log.info(
                "not published again: %d incident revisions the incident topic already held "
                "(made again from records re-read after a restore)",
                self._suppressed_told,
            )
        if await commit(self.consumer, commits, log):
            self.published.committed({tp: c.offset for tp, c in commits.items()})

    async def _send_batched(self, topic: str, records: Iterable[tuple[bytes, bytes, int]]) -> None:
        """Queue ``(key, value, partition)`` records in batches built here, one open per
        partition; their futures join ``_pending`` (awaited by the flush).

        Why not ``send`` per record: a flush writes every changed key's state (thousands
        at a time in a backlog), and each ``send`` goes through the accumulator's
        per-record bookkeeping and a future of its own; one batch per partition is one
        future (as :class:`connectors.kafka.producer.EventProducer` does for events).
        Per-partition order is kept: a batch is queued behind the partition's earlier
        ones, and what is sent after it (the marks) goes behind it.
        """
        producer = self.producer
        pending = self._pending
        open_batches: dict[int, Any] = {}
        for key, value, partition in records:
            batch = open_batches.get(partition)
            if batch is None:
                batch = open_batches[partition] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is not None:
                continue
            pending.append(await producer.send_batch(batch, topic, partition=partition))
            batch = open_batches[partition] = producer.create_batch()
            # The first record of a batch always fits (aiokafka sizes it to the record).
            batch.append(key=key, value=value, timestamp=None)
        for partition, batch in open_batches.items():
            if batch.record_count():
                pending.append(await producer.send_batch(batch, topic, partition=partition))

    async def _write_marks(self) -> None:
        """Queue the mark of every owned raw partition whose mark moved, after its key
        states: the same state partition, so a mark on the topic means the states sent
        before it are there too (a mark newer than its states would suppress too little,
        never too much, but would cost the guarantee)."""
        published = self.published
        await published.refresh(every=REFRESH_SECONDS)
        written = self._marks
        for partition in sorted(self._owned):
            mark = published.mark(partition)
            if mark and written.get(partition) != mark:
                written[partition] = mark
                self._pending.append(
                    await self.producer.send(
                        self.state_topic, encode_mark(mark), mark_key(partition), partition
                    )
                )

    # -- rebalances ------------------------------------------------------------------------
    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Everything is about to be reassigned: deliver and commit while we own it
        (under the lock, from :class:`~streams.app.group.Listener`)."""
        await self._flush()

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        """Forget lost keys, restore gained ones, resume kept partitions where we were."""
        await self._adopt(assigned)

    def _failed(self, exc: BaseException) -> None:
        """A rebalance callback failed: the main loop raises it."""
        self._fatal = exc

    async def _adopt(self, assigned: set[TopicPartition]) -> None:
        raw = {tp for tp in assigned if tp.topic in self._raw_names}
        owned = frozenset(tp.partition for tp in raw)
        if len(raw) != len(owned) * len(self._raw_names):
            raise RuntimeError(
                f"assignment is not co-partitioned (do all raw topics have {self.partitions} "
                f"partitions?): {sorted((tp.topic, tp.partition) for tp in raw)}"
            )
        wheres = [(tp.topic, tp.partition) for tp in raw]
        # First forget the lost lanes, then restore the gained ones: a gained lane starts
        # from its states with no watermark of its own (streams.app.lanes).
        dropped = self.pipeline.retain(wheres)
        kept = {tp: t for tp, t in self._offsets.items() if tp in raw}
        for tp, tracker in kept.items():
            if tracker.next_offset is not None:
                self.consumer.seek(tp, tracker.next_offset)
        self._offsets = {tp: kept.get(tp) or PartitionOffsets() for tp in raw}
        self._paused = set()  # a new assignment: the next batch decides what waits
        self.metrics.paused_partitions.set(0)
        gained = owned - self._owned
        lost = self._owned - owned
        self.published.forget(lost)
        for partition in lost:
            self._marks.pop(partition, None)
        timeout = self.options.restore_timeout_seconds
        states, marks = await self.changelog.read(gained, timeout)
        for lane, restored in states.items():
            self.pipeline.restore(restored, lane)
        scanned = await self.published.inherit(
            marks, (tp for tp in raw if tp.partition in gained), timeout
        )
        self._receipts.forget(wheres)
        self._owned = owned
        self._assigned_at = _now()
        log.info(
            "partitions %s: restored %d keys from %s, kept %d, dropped %d buffered events, "
            "read %d incident records past the marks",
            sorted(owned),
            sum(map(len, states.values())),
            self.state_topic,
            len(owned) - len(gained),
            dropped,
            scanned,
        )

    # -- the watermark and metrics ---------------------------------------------------------
    async def _settle_announced(self) -> None:
        """Let the announced partitions read to an end fetched after their announcement
        stop holding the watermark (:mod:`streams.app.announced`; the receipts are the
        ones :meth:`_caught_up` observed at the start of this loop)."""
        consumer = self.consumer
        receipts = self._receipts
        done = []
        for where, at in self.pipeline.announced().items():
            tp = TopicPartition(*where)
            if tp not in self._offsets or receipts.after(where) <= at * 1000:
                continue  # the same millisecond does not count: one more poll
            highwater = consumer.highwater(tp)
            if highwater is not None and await consumer.position(tp) >= highwater:
                done.append(where)
        if done:
            self.pipeline.settle(done)

    def _caught_up(self) -> dict[Partition, float]:
        """Assigned raw partitions read to the high watermark of a response whose request
        was sent after a known moment -> that moment (epoch s): every record written there
        before it has been read (:mod:`streams.app.announced`, :meth:`Pipeline.spread`)."""
        consumer = self.consumer
        receipts = self._receipts
        leaders = _leaders(consumer)
        out: dict[Partition, float] = {}
        for tp, tracker in self._offsets.items():
            where = (tp.topic, tp.partition)
            leader = leaders(tp) if leaders is not None else None
            receipts.observe(where, consumer.last_poll_timestamp(tp), leader)
            if leaders is None:
                continue  # no leader known: nothing is claimed (see _leaders)
            after = receipts.after(where)
            position = tracker.next_offset
            if after == -math.inf or position is None:
                continue
            highwater = consumer.highwater(tp)
            if highwater is not None and position >= highwater:
                out[where] = after / 1000
        return out

    def _busy(self) -> list[Partition]:
        """Assigned raw partitions with records left to read: they hold their lane.

        A partition we have read from is busy while our position is below its high
        watermark. One we have not read from yet is busy until the consumer knows both
        where it starts reading (the committed offset) and the partition's end, and they
        meet: a gained partition's backlog must hold its lane until it is read, however
        long the first fetch takes, or the clock would fire the restored keys' timers
        before their records. An empty or fully committed partition is released by its
        first fetch (a lane holds only itself, so a slow one stalls nobody else). Where the
        consumer does not show its start (:func:`_start_position`), the old rule:
        ``startup_hold_seconds`` after an assignment.
        """
        consumer = self.consumer
        holding = _now() - self._assigned_at < self.options.startup_hold_seconds
        busy = []
        for tp, tracker in self._offsets.items():
            highwater = consumer.highwater(tp)
            position = tracker.next_offset
            if position is not None:
                if highwater is not None and position < highwater:
                    busy.append((tp.topic, tp.partition))
                continue
            start = _start_position(consumer, tp)
            if start is _UNKNOWN:
                if holding and (highwater is None or highwater > 0):
                    busy.append((tp.topic, tp.partition))
            elif highwater is None or start is None or start < highwater:
                busy.append((tp.topic, tp.partition))
        return busy

    def _observe_gauges(self) -> None:
        """Refresh the gauges, at most once a second (counting open incidents walks
        every key's state)."""
        metrics = self.metrics
        if not metrics.gauges_due(_now()):
            return
        lanes = self.pipeline.lanes
        metrics.observe_lanes(lanes)  # the least decided lane: no clock-made limit waits
        stats = lanes.stats
        stale = stats.stale - self._stale_seen
        if stale:
            metrics.stale.inc(stale)
            self._stale_seen = stats.stale
        late = stats.late_applied - self._late_applied_seen
        if late:
            metrics.late_applied.inc(late)
            self._late_applied_seen = stats.late_applied
        if stats.late > self._late_told:
            # Behind the watermark: a source outage past source_idle_seconds, a grace too
            # small for an unordered source, or a bug. Once a second at most, as a total.
            log.warning(
                "%d events so far arrived behind the watermark (%d skipped as stale, "
                "%d applied as newer versions)",
                stats.late,
                stats.stale,
                stats.late_applied,
            )
            self._late_told = stats.late
        consumer = self.consumer
        metrics.observe_kafka(len(consumer.assignment()), fetched_ago(consumer, time.time()))
        alive, idle = self.pipeline.sources(time.time(), self._busy())
        metrics.sources_alive.set(alive)
        metrics.sources_idle.set(idle)
        malformed = self.pipeline.malformed_headers - self._malformed_seen
        if malformed:
            metrics.malformed_progress.inc(malformed)
            self._malformed_seen = self.pipeline.malformed_headers
        for tp, tracker in self._offsets.items():
            highwater = self.consumer.highwater(tp)
            if highwater is not None and tracker.next_offset is not None:
                metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(
                    max(0, highwater - tracker.next_offset)
                )


_UNKNOWN: Any = object()
"""What :func:`_start_position` says where aiokafka does not show the position."""


def new_pipeline(core: CoreSettings, layout: TopicLayout, options: ProcessorSettings) -> Pipeline:
    """A :class:`Pipeline` for these options (both engines build theirs here; the faust
    engine builds one again at every recovery)."""
    return Pipeline(
        core,
        layout,
        source_idle_seconds=options.source_idle_seconds,
        max_future_seconds=options.max_future_seconds,
    )


def _now() -> float:
    """The running loop's clock (the one its timers and ``asyncio.sleep`` follow), not
    ``time.monotonic``: flushes, ticks and the start-up hold then move with a test's fake
    clock (looptime). Event time and the pipeline's clock stay ``time.time()``."""
    return asyncio.get_running_loop().time()


def _start_position(consumer: AIOKafkaConsumer, tp: TopicPartition) -> Any:
    """The consumer's fetch position of ``tp`` (the offset of the next record it will hand
    out: where reading starts, for a partition nothing was read from yet), None while it is
    not known (the committed offset not fetched yet), :data:`_UNKNOWN` without the API.

    aiokafka's ``position()`` is a coroutine that waits for a valid position; the busy
    rule runs every loop and must not wait, so this reads the subscription state it reads
    (not public API: a test checks it is there, so an aiokafka that moves it fails the
    test, not the watermark)."""
    try:
        state = consumer._subscription.subscription.assignment.state_value(tp)
    except Exception:  # no subscription or assignment right now, or another aiokafka
        return _UNKNOWN
    if state is None:
        return _UNKNOWN
    return state.position if state.has_valid_position else None


def _leaders(consumer: AIOKafkaConsumer) -> Any:
    """The consumer's ``leader_for_partition`` (aiokafka's cluster metadata), or None.

    Receipts answer "sent after" only for one broker's sequence of fetches (one in
    flight per broker): after a leader change they start over (:class:`Receipts`). The
    metadata is not public API; without it no partition counts as caught up (the
    watermark then waits for the partitions' own records and heartbeats, as before).
    """
    client = getattr(consumer, "_client", None)
    cluster = getattr(client, "cluster", None)
    return getattr(cluster, "leader_for_partition", None)


def _on_incident_acked(labels: Any, metrics: Metrics, newest: float, published: Published) -> Any:
    """A done-callback counting an incident revision once the broker has it, and noting
    where it landed (the bound of the next mark)."""

    def done(future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        sent = future.result()
        published.acked(sent.partition, sent.offset)
        labels.inc()
        if newest:
            metrics.latency.observe(max(0.0, time.time() - newest))

    return done
