"""The faust-streaming worker: raw topics in, incidents out, state in a changelog table.

One agent consumes every raw topic (they are co-partitioned by correlation key)
without faust's automatic acks (``noack().events()``), in batches of whatever
has arrived, and feeds a :class:`~streams.app.pipeline.Pipeline`;
a timer feeds it the worker's clock (ticks), so quiet keys' windows still
close. Delivery is at-least-once, in this order, for every batch and tick:

1. publish incident revisions and dead letters and, every ``snapshot_seconds``,
   the changed key states (to the table's changelog topic), and await every
   one of those sends: all of it acked;
2. only then acknowledge the records the correlator has *released* and the
   last snapshot covers. Records still waiting for the watermark are not acked,
   so faust cannot commit their offsets: after a crash they are read again.

The table is only the durable copy of the correlator's per-key state: keys are
restored from it when this worker gains partitions, and forgotten when it loses
them. A key's snapshot lands on the same partition number as its raw records
(murmur2, :func:`partition_for`, what ``use_partitioner`` would do). Snapshots are
written with the producer directly (local store + changelog record, the bytes
``table[key] = value`` would write): faust's own path publishes changelog
records one at a time and was the slowest part of a batch. Recovery is faust's.

faust is tuned in :mod:`streams.app.faust_tuning` (monitor, batch hand-over,
``fetch_max_wait_ms``); see ``bench/pipeline_bench.py`` for the measurements.

Traps:

* faust's batching helper ``take_events`` acks every event of a batch when the
  batch is done, including events still buffered for the watermark, which
  would then be committed and lost on a crash: hence ``noack()`` and our acks.
  (It was also no faster: 7.8k vs 8.0k events/s in ``bench/pipeline_bench.py``.)
* The timer and the agent share the correlator; a lock keeps a tick from
  running while a batch is half delivered.
* faust waits, on stop, until every record it handed out is acked
  (``stream_wait_empty``): records held for the watermark never are, so that
  wait is off; their offsets were not committed and the next worker reads them.
* faust must not create the raw topics (a broker's defaults would give them one
  partition): :func:`connectors.topics.ensure_topics` runs first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust
import msgspec
from aiokafka.partitioner import murmur2

from connectors.kafka_config import KafkaSettings, faust_credentials
from connectors.topics import TopicLayout
from schemas.codec import encode
from streams.app import faust_tuning
from streams.app.metrics import Metrics
from streams.app.pipeline import BatchOutcome, Pipeline, RawRecord
from streams.core import CoreConfig
from streams.core.snapshot import decode_state

log = logging.getLogger("gputriage.processor")


class ProcessorOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[processor]`` settings (an unknown key is an error, not a silent default)."""

    app_id: str = "gputriage"
    batch_max: int = 2000
    """Records per batch at most."""
    tick_seconds: float = 0.1
    """How often the worker's clock advances the watermark on quiet keys."""
    metrics_port: int | None = 9464
    """``/metrics`` port; ``None`` disables it, 0 picks a free port."""
    metrics_addr: str = "0.0.0.0"
    session_timeout_seconds: float = 10.0
    """Consumer group session timeout: how long a dead worker keeps its partitions."""
    rebalance_timeout_seconds: float = 10.0
    """How long a rebalance waits for members. The group coordinator waits this long
    for members before it completes a join, so it bounds every worker's start-up."""
    stop_timeout_seconds: float = 15.0
    """On SIGINT/SIGTERM, exit anyway after this long (see ``gputriage.process``)."""
    startup_hold_seconds: float = 10.0
    """After an assignment, how long a partition not yet read holds the watermark."""
    snapshot_seconds: float = 1.0
    """How often changed key states are written to the changelog. Records are
    committed only after the snapshot covering them, so this is also the commit
    cadence; a longer one writes less, and re-reads more after a crash."""
    fetch_max_wait_ms: int = 100
    """How long a fetch may wait on the broker for records (faust hard-codes 1500 ms;
    see :mod:`streams.app.faust_tuning`): the latency floor of every batch."""


def partition_for(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` (murmur2, as Java's)."""
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions


class Processor:
    """The agent and the timer of one worker, around one :class:`Pipeline`."""

    def __init__(
        self,
        app: faust.App,
        pipeline: Pipeline,
        layout: TopicLayout,
        options: ProcessorOptions,
        metrics: Metrics,
    ) -> None:
        self.app = app
        self.pipeline = pipeline
        self.layout = layout
        self.options = options
        self.metrics = metrics
        self.partitions = layout.raw[next(iter(layout.raw))].partitions
        self._raw_names = set(layout.raw_topics)
        self._positions: dict[Any, int] = {}
        self.incidents_topic_name = layout.incidents.name
        self.dead_letter_topic_name = layout.dead_letters.name
        self.table = app.Table(
            "core-state",
            partitions=self.partitions,
            key_type=bytes,  # bytes means the "raw" codec, for writes *and* recovery
            value_type=bytes,
            use_partitioner=True,
        )
        self._stream: Any = None
        self._lock = asyncio.Lock()
        self._owned: frozenset[int] | None = None
        self._assigned_at = time.monotonic()
        self._to_ack: list[Any] = []
        self._last_flush = time.monotonic()
        self._stale_seen = 0
        self._gauges_at = 0.0

    # -- the agent -----------------------------------------------------------------
    async def run(self, stream: Any) -> None:
        # ``noack()``: faust acknowledges nothing by itself; a record is acked only
        # when the correlator has released it and its effects are delivered. A batch
        # is whatever has arrived (up to ``batch_max``): no timer, so no added latency.
        manual = stream.noack()
        self._stream = manual
        channel = manual.channel
        batch: list[Any] = []
        async for event in manual.events():
            batch.append(event)
            if len(batch) >= self.options.batch_max or channel.empty():
                await self._process(batch)
                batch = []

    async def _process(self, events: list[Any]) -> None:
        records = []
        newest = 0.0
        positions = self._positions
        for event in events:
            message = event.message
            records.append(
                RawRecord(
                    topic=message.topic,
                    partition=message.partition,
                    offset=message.offset,
                    key=message.key,
                    value=message.value,
                    timestamp_ms=int(message.timestamp * 1000),
                    token=event,
                )
            )
            newest = max(newest, message.timestamp)
            positions[message.tp] = message.offset + 1
        async with self._lock:
            self._sync_ownership()
            outcome = self.pipeline.process(records, self._busy())
            await self._deliver(outcome, newest)

    # -- the timer -------------------------------------------------------------------
    async def tick(self) -> None:
        if self._stream is None or self.app.rebalancing:
            return
        async with self._lock:
            self._sync_ownership()
            outcome = self.pipeline.tick(time.time(), self._busy())
            await self._deliver(outcome, 0.0)
            self._observe_gauges()

    # -- delivery ----------------------------------------------------------------------
    async def _deliver(self, outcome: BatchOutcome, newest: float) -> None:
        metrics = self.metrics
        # Everything goes out through the producer at once and is awaited together
        # (one round trip per batch, not one per record): faust's ``table[key] =``
        # path queues each changelog record in a ``ProducerBuffer`` that publishes
        # them one at a time (4-8k/s, see bench/faust/FINDINGS.md).
        producer = self.app.producer
        pending: list[Any] = []
        for incident in outcome.incidents:
            pending.append(
                await producer.send(
                    self.incidents_topic_name,
                    incident.id.encode(),
                    encode(incident),
                    None,
                    None,
                    None,
                )
            )
        for dead in outcome.dead_letters:
            pending.append(
                await producer.send(
                    self.dead_letter_topic_name, dead.key, encode(dead), None, None, None
                )
            )
        # State is written at most every ``snapshot_seconds``, each changed key once:
        # per batch, a busy key would be written (and the changelog grow) per batch.
        # Released records wait for the snapshot that covers them before they are
        # acked, so a crash never commits a record whose effect on state was lost.
        self._to_ack += outcome.released
        flushing = time.monotonic() - self._last_flush >= self.options.snapshot_seconds
        if flushing:
            self._last_flush = time.monotonic()
            store = self.table.data
            changelog = self.table.changelog_topic.get_topic_name()
            n = self.partitions
            for key, data in self.pipeline.snapshots():
                raw_key = key.encode()
                store[raw_key] = data  # the local copy ``table.items()`` reads
                # What ``table[raw_key] = data`` would write with ``use_partitioner``:
                # the key's murmur2 partition, the raw key and value bytes.
                pending.append(
                    await producer.send(changelog, raw_key, data, partition_for(key, n), None, None)
                )
        if pending:
            await asyncio.gather(*pending)
        acked_at = time.time()
        for incident in outcome.incidents:
            metrics.incidents_out.labels(incident.type, incident.severity, incident.status).inc()
            if newest:
                metrics.latency.observe(max(0.0, acked_at - newest))
        for dead in outcome.dead_letters:
            metrics.dead_letters.labels(dead.topic).inc()
            log.warning(
                "dead letter: %s[%d]@%d: %s%s",
                dead.topic,
                dead.partition,
                dead.offset,
                dead.reason,
                f" (at {dead.field})" if dead.field else "",
            )
        for source, count in outcome.events_by_source.items():
            metrics.events_in.labels(source).inc(count)
        if flushing:
            to_ack, self._to_ack = self._to_ack, []
            for event in to_ack:
                await self._stream.ack(event)

    def _observe_gauges(self) -> None:
        """Refresh the gauges, at most once a second (counting open incidents walks
        every key's state)."""
        now = time.monotonic()
        if now - self._gauges_at < 1.0:
            return
        self._gauges_at = now
        correlator = self.pipeline.correlator
        self.metrics.open_incidents.set(correlator.open_incidents())
        self.metrics.buffered.set(correlator.pending())
        if correlator.watermark > 0:
            self.metrics.watermark_delay.set(max(0.0, time.time() - correlator.watermark))
        stale = correlator.stats.stale - self._stale_seen
        if stale:
            self.metrics.stale.inc(stale)
            self._stale_seen = correlator.stats.stale
        consumer = self.app.consumer
        for tp in consumer.assignment():
            if tp.topic in self._raw_names:
                highwater = consumer.highwater(tp)
                position = self._positions.get(tp)
                if isinstance(highwater, int) and position is not None:
                    self.metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(
                        max(0, highwater - position)
                    )

    def _busy(self) -> list[tuple[str, int]]:
        """Assigned raw partitions with records left to read: they hold the watermark.

        A partition we have read from is busy while our position is below its high
        watermark. One we have not read from yet holds the watermark only for
        ``startup_hold_seconds`` after an assignment (its backlog may not be
        fetched yet); after that, an empty or fully committed partition must not
        stall everyone.
        """
        consumer = self.app.consumer
        holding = time.monotonic() - self._assigned_at < self.options.startup_hold_seconds
        busy = []
        for tp in consumer.assignment():
            if tp.topic not in self._raw_names:
                continue
            highwater = consumer.highwater(tp)
            position = self._positions.get(tp)
            if position is not None:
                if isinstance(highwater, int) and position < highwater:
                    busy.append((tp.topic, tp.partition))
            elif holding and (highwater is None or highwater > 0):
                busy.append((tp.topic, tp.partition))
        return busy

    # -- partitions -------------------------------------------------------------------
    def _sync_ownership(self) -> None:
        """Follow the assignment: forget keys we lost, restore keys we gained."""
        owned = frozenset(
            tp.partition for tp in self.app.consumer.assignment() if tp.topic in self._raw_names
        )
        if owned == self._owned:
            return
        n = self.partitions
        correlator = self.pipeline.correlator
        dropped = correlator.forget(lambda key: partition_for(key, n) in owned)
        # Records of lost partitions are never acked here: their state changes were
        # not snapshotted, so the new owner must read them again from the last commit.
        self._to_ack = [e for e in self._to_ack if e.message.partition in owned]
        known = set(correlator.keys)
        gained = [
            decode_state(data)
            for key, data in self.table.items()
            if key is not None
            and data is not None
            and (text := key.decode() if isinstance(key, bytes) else str(key)) not in known
            and partition_for(text, n) in owned
        ]
        self.pipeline.restore(gained)
        restored = len(gained)
        log.info(
            "partitions %s: restored %d keys from the changelog, dropped %d buffered events",
            sorted(owned),
            restored,
            dropped,
        )
        self._owned = owned
        self._assigned_at = time.monotonic()


def create_app(
    core: CoreConfig,
    kafka: KafkaSettings,
    brokers: list[str],
    layout: TopicLayout,
    options: ProcessorOptions,
    metrics: Metrics | None = None,
) -> tuple[faust.App, Processor]:
    """The faust app and its processor, wired; the caller runs the worker."""
    patches = faust_tuning.install(options.fetch_max_wait_ms)
    log.debug("faust tuning: %s", ", ".join(patches) or "none")
    app = faust.App(
        options.app_id,
        broker=[f"kafka://{b}" for b in brokers],
        broker_credentials=faust_credentials(kafka),
        store="memory://",
        web_enabled=False,
        autodiscover=False,
        topic_partitions=layout.raw[next(iter(layout.raw))].partitions,
        topic_replication_factor=layout.incidents.replication_factor,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        broker_commit_interval=1.0,
        # Records held for the watermark are never acked before a stop, so waiting
        # for "all acked" would hang the stop; they are simply read again.
        stream_wait_empty=False,
        broker_session_timeout=options.session_timeout_seconds,
        broker_heartbeat_interval=min(1.0, options.session_timeout_seconds / 3),
        broker_rebalance_timeout=options.rebalance_timeout_seconds,
        table_standby_replicas=0,
        Monitor=faust_tuning.NoopMonitor,
    )
    raw = app.topic(*layout.raw_topics, key_serializer="raw", value_serializer="raw")
    pipeline = Pipeline(core, layout)
    processor = Processor(app, pipeline, layout, options, metrics or Metrics())
    app.agent(raw, name="correlate", concurrency=1)(processor.run)
    app.timer(options.tick_seconds)(processor.tick)
    return app, processor
