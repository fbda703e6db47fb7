"""Producing typed events to their raw topics: the demo's scenario feeder and the tests use it.

Each event is encoded with the one codec, sent to its schema's raw topic and keyed by its
correlation key, so every event about one node lands on the same partition number.

Traps: :meth:`EventProducer.send_many` enqueues a batch and then awaits every ack (one
round trip per batch); the record timestamp is the producer's clock, not the event time (a
replay of old events would fall out of retention); headers are progress, not payload, and
heartbeats go to the explicit partitions earlier acks named (one keyed like an event would
reach one partition only); no idempotent producer (the embedded Tansu lacks it; incident
ids make duplicates harmless); create the topics first, or brokers auto-create each with
one partition. In full: docs/connectors.md, design notes: connectors/kafka/producer.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, NamedTuple, Self

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2

from connectors.kafka.admin import TopicError, ensure_topics
from connectors.kafka.config import (
    KafkaUnreachable,
    brokers_text,
    connect_timeout,
    error_reason,
    start_client,
)
from schemas.codec import AnyEvent, encode, fitted_dead_letter
from schemas.dead_letters import DeadLetter
from schemas.events import Tick
from schemas.keys import Router, correlation_key
from schemas.progress import Headers
from schemas.topics import TopicLayout

log = logging.getLogger("gputriage.kafka")


BATCH_BYTES = 512 << 10
"""The size of the record batches :meth:`EventProducer.send_many` builds (aiokafka's
``max_batch_size``). At aiokafka's 16 KB a batch held ~40 events, and the per-batch work
(a future, the accumulator, the produce request's framing) cost more than the events:
100k generated events took 2.2 s of CPU at 16 KB and 0.94 s at 512 KB, on the same topics
Half of Kafka's default ``max.message.bytes`` (1 MB): a batch is one
message to the broker, and a full batch must never be refused. The default of every
:class:`EventProducer` (a live connector's batches fill only as far as ``linger_ms``
lets them; a backfill's fill up). Memory: up to one batch per partition written."""


class KafkaTarget(NamedTuple):
    """Where a connector publishes: :func:`start_producer`'s two arguments, as one value.

    The one shape Kafka settings travel in: every connector's entry point takes
    ``client_kwargs, layout`` (``run_kmsg``, ``run_connect``, ``connect_dcgm``);
    this names the pair where it must be one value (``connect_nvml`` gets a
    function returning it, called only once NVML is known to work), and
    ``start_producer(*target)`` spreads it again.
    """

    client_kwargs: Mapping[str, Any]
    layout: TopicLayout


async def start_producer(client_kwargs: Mapping[str, Any], layout: TopicLayout) -> EventProducer:
    """Create missing topics, then a started :class:`EventProducer` (every connector's start).

    Any failure is a :class:`~connectors.kafka.config.KafkaUnreachable` naming the
    brokers; connectors let it through and the CLI says it, the same way for every
    connector (and without a traceback).
    """
    from aiokafka.errors import KafkaError  # noqa: PLC0415

    producer = EventProducer(client_kwargs, layout)
    try:
        created = await ensure_topics(client_kwargs, layout)
        if created:
            log.info("created topics %s", ", ".join(created))
        await producer.start()  # KafkaUnreachable, within the connect timeout
    except (KafkaError, OSError, TopicError) as exc:  # past the start: a topic refused...
        await producer.stop()
        reason = str(exc) if isinstance(exc, TopicError) else error_reason(exc)
        raise KafkaUnreachable(
            f"cannot reach Kafka at {brokers_text(client_kwargs)}: {reason}", reason
        ) from None
    return producer


def partition_of(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner (murmur2 of the key, as Java's and aiokafka's)."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


class EventProducer:
    """Encode events and produce them to their raw topics, keyed by correlation key."""

    def __init__(
        self,
        client_kwargs: Mapping[str, Any],
        layout: TopicLayout,
        *,
        linger_ms: int = 5,
        **producer_options: Any,
    ) -> None:
        self.layout = layout
        self._connect_timeout_seconds = connect_timeout(client_kwargs)
        self._options: dict[str, Any] = {
            **client_kwargs,
            "acks": "all",
            "enable_idempotence": False,
            "linger_ms": linger_ms,
            "max_batch_size": BATCH_BYTES,
            **producer_options,
        }
        self._producer: AIOKafkaProducer | None = None
        self._partitions: dict[tuple[str, bytes], int] = {}
        self._partition_counts: dict[str, int] = {}
        self.sent = 0
        """Records acknowledged so far."""
        self.router = Router()
        """Which records the cluster key also gets a copy of: it remembers what it sent, so
        a failed send forgets everything (:meth:`_forget_routes`) and the next record of
        each object is sent again rather than lost."""

    async def start(self) -> None:
        """Connect (fetches metadata) within the connect timeout; raises
        :class:`~connectors.kafka.config.KafkaUnreachable` when it cannot.

        The aiokafka producer is created here, not in ``__init__``: aiokafka
        clients bind to the running event loop when constructed, and fail
        outside one.
        """
        producer = AIOKafkaProducer(**self._options)
        await start_client(producer, self._options, timeout_seconds=self._connect_timeout_seconds)
        self._producer = producer

    async def stop(self) -> None:
        """Flush what is pending and disconnect (a no-op when not started)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    @property
    def producer(self) -> AIOKafkaProducer:
        """The started aiokafka producer."""
        if self._producer is None:
            raise RuntimeError("EventProducer is not started")
        return self._producer

    def route(self, event: AnyEvent) -> tuple[str, bytes, bytes]:
        """``(topic, key, value)`` for ``event``; ``TypeError`` for ticks (they have no topic)."""
        topic = self.layout.raw_topic(event)
        return topic, correlation_key(event).encode(), encode(event)

    async def send(self, event: AnyEvent) -> Any:
        """Produce one event (and its copy for the cluster key, if it has one:
        :class:`schemas.keys.Router`) and wait for the acknowledgements; returns aiokafka's
        metadata of the event itself."""
        metadata = None
        try:
            for copy in self.router.route(event):
                topic, key, value = self.route(copy)
                sent = await self.producer.send_and_wait(topic, value, key=key)
                metadata = metadata or sent
                self.sent += 1
        except BaseException:
            self._forget_routes()
            raise
        return metadata

    async def send_many(
        self,
        events: Iterable[AnyEvent],
        *,
        headers: Headers | None = None,
        used: set[tuple[str, int]] | None = None,
        route: bool = True,
    ) -> int:
        """Produce every event (and the copies :attr:`router` makes for the
        cluster key), then wait for all acknowledgements; returns how many records.
        ``route=False`` publishes the events as they are: records already routed (a dump
        of the raw topics, copies included), which routing again would copy twice.

        If one send fails, the others still complete (or fail) before the first
        error is raised, so no acknowledgement is left dangling. An event that
        cannot be routed (a tick) raises ``TypeError`` after the ones before it
        are settled. ``headers`` go on every record (the publish loop's source
        progress, :mod:`schemas.progress`); ``used`` collects the ``(topic,
        partition)`` of every acknowledged record (where heartbeats must go).
        """
        shared = list(headers) if headers else None  # one list: aiokafka only reads it
        route_one = self.router.route
        fanned = (copy for event in events for copy in route_one(event)) if route else events
        records = ((*self.route(event), shared) for event in fanned)
        try:
            return await self._send_records(records, used)
        except BaseException:
            self._forget_routes()
            raise

    def _forget_routes(self) -> None:
        """A send failed: some copies the router counts as sent may be lost, so start
        afresh. The cluster key absorbs the repeats this causes (the router's first
        record of every object), and loses nothing."""
        self.router = Router()

    async def send_dead_letters(self, letters: Iterable[DeadLetter]) -> int:
        """Produce dead letters to the dead-letter topic, keyed by the failed record's key,
        then wait for every acknowledgement, as :meth:`send_many` does; returns how many."""
        topic = self.layout.dead_letters.name
        fitted = (fitted_dead_letter(letter) for letter in letters)  # always under 1 MB
        records = ((topic, letter.key, encode(letter), None) for letter in fitted)
        return await self._send_records(records)

    async def send_heartbeats(
        self, tick: Tick, partitions: Iterable[tuple[str, int]], headers: Headers
    ) -> int:
        """Produce ``tick`` to each raw ``(topic, partition)`` given (explicitly, no key),
        with ``headers``, then wait for every acknowledgement; returns how many.

        A source's heartbeat (see :class:`connectors.publish.Publisher`): the processor
        reads it as progress only and never ingests it as an event.
        """
        producer = self.producer
        value = encode(tick)
        pending = []
        try:
            for topic, partition in partitions:
                pending.append(
                    await producer.send(topic, value, partition=partition, headers=list(headers))
                )
        finally:
            results = await asyncio.gather(*pending, return_exceptions=True)
        return self._settled(results, None)

    async def _send_records(
        self,
        records: Iterable[tuple[str, bytes | None, bytes, Headers | None]],
        used: set[tuple[str, int]] | None = None,
    ) -> int:
        """Produce ``records`` in batches built here, one per partition, then await them all.

        Why not ``producer.send`` per record: each call runs aiokafka's partitioner
        (murmur2 in pure Python) and its accumulator's bookkeeping; building the batches
        ourselves, with the partition of each key computed once per producer, measured
        3.2-4x the records/s on the same topics. The partition is the
        default partitioner's (:func:`partition_of`), so keys land where the processor
        expects them. A record without a key (none of ours has one) takes ``send``.
        """
        producer = self.producer
        pending: list[asyncio.Future[Any]] = []
        counts: list[int] = []
        open_batches: dict[tuple[str, int], tuple[Any, list[int]]] = {}
        try:
            for topic, key, value, headers in records:
                if key is None:
                    pending.append(await producer.send(topic, value, headers=headers))
                    counts.append(1)
                    continue
                where = (topic, await self._partition(topic, key))
                current = open_batches.get(where)
                if current is None:
                    current = open_batches[where] = (producer.create_batch(), [0])
                batch, size = current
                if batch.append(key=key, value=value, timestamp=None, headers=headers or []):
                    size[0] += 1
                    continue
                # Full: send it and start the next with this record.
                pending.append(await producer.send_batch(batch, topic, partition=where[1]))
                counts.append(size[0])
                batch = producer.create_batch()
                # The first record of a batch always fits (an oversize one is the broker's
                # to refuse, as with send): no loop here.
                batch.append(key=key, value=value, timestamp=None, headers=headers or [])
                open_batches[where] = (batch, [1])
            for (topic, partition), (batch, size) in open_batches.items():
                if size[0]:
                    pending.append(await producer.send_batch(batch, topic, partition=partition))
                    counts.append(size[0])
            open_batches.clear()
        finally:
            # Also when routing or enqueueing failed half-way: settle what was sent.
            results = await asyncio.gather(*pending, return_exceptions=True)
        return self._settled(results, used, counts)

    async def partitions_of(self, key: bytes, topics: Iterable[str]) -> set[tuple[str, int]]:
        """The ``(topic, partition)`` a record keyed ``key`` goes to on each topic: the
        partitioner :meth:`send_many` uses, so a node source's own key's partitions are
        where its records would land (:class:`connectors.publish.Publisher` announces them
        at start). Fetches the topics' metadata once; raises what that raises."""
        return {(topic, await self._partition(topic, key)) for topic in topics}

    async def _partition(self, topic: str, key: bytes) -> int:
        """The default partitioner's partition of ``key`` (cached: keys repeat, per node)."""
        cached = self._partitions.get((topic, key))
        if cached is not None:
            return cached
        count = self._partition_counts.get(topic)
        if count is None:
            count = self._partition_counts[topic] = len(await self.producer.partitions_for(topic))
        if len(self._partitions) >= 1 << 18:
            self._partitions.clear()
        partition = self._partitions[(topic, key)] = partition_of(key, count)
        return partition

    def _settled(
        self, results: list[Any], used: set[tuple[str, int]] | None, counts: list[int] | None = None
    ) -> int:
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if used is not None:
            used.update((metadata.topic, metadata.partition) for metadata in results)
        sent = sum(counts) if counts is not None else len(results)
        self.sent += sent
        return sent

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
