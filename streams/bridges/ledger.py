"""The bridge ledger: what was delivered, per route and incident, on a compacted topic.

One :class:`~schemas.bridges.BridgeDelivery` per ``(route, incident id)`` and one
:class:`~schemas.bridges.BridgeGroup` per storm group, keyed for compaction, read back
whole before consuming (:meth:`Ledger.restore`) and held in memory (people-scale traffic).

Traps: a write is a write only once acked (``acks="all"``): the intent is on the topic
before the vendor is called, and an offset is committed only after the delivered entry;
the default partitioner suffices, since restore reads every partition; the topic is read
to the ends it had when the restore began (:func:`streams.app.ranges.read_range`); a
record that does not decode is logged and counted, never fatal (at worst one incident is
delivered once more). docs/bridges.md, design notes: the bridge ledger.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import aclosing
from typing import Any, Final

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from schemas.bridges import KEY_SEPARATOR, BridgeDelivery, BridgeGroup
from schemas.codec import RecordError, encode, typed_decoder
from schemas.topics import TopicLayout, TopicSpec
from streams.app.ranges import read_range

log = logging.getLogger("gputriage.bridge")

_decode: Final = typed_decoder(BridgeDelivery | BridgeGroup)  # type: ignore[arg-type]
GROUP_MARK: Final = "group"


def ledger_topic(layout: TopicLayout, group_id: str) -> TopicSpec:
    """``<prefix>.bridge.<group id>.ledger``: compacted like the incident topic, with its
    partitions and its retention (``compact,delete``): an entry last written longer ago
    than incidents are kept is about an incident the topic no longer holds, so it can
    never be read again, and the ledger does not grow forever."""
    name = f"{layout.prefix}.bridge.{group_id}.ledger" if layout.prefix else f"bridge.{group_id}"
    return TopicSpec(
        name=name,
        partitions=layout.incidents.partitions,
        replication_factor=layout.incidents.replication_factor,
        key="route NUL incident id (or route NUL group NUL group key)",
        configs=dict(layout.incidents.configs),
    )


def delivery_key(route: str, incident_id: str) -> bytes:
    return f"{route}{KEY_SEPARATOR}{incident_id}".encode()


def group_key(route: str, group: str) -> bytes:
    return f"{route}{KEY_SEPARATOR}{GROUP_MARK}{KEY_SEPARATOR}{group}".encode()


class Ledger:
    """The ledger topic, read back at start and written as deliveries happen."""

    def __init__(self, client_kwargs: Mapping[str, Any], topic: str) -> None:
        self.topic = topic
        self._kwargs = dict(client_kwargs)
        self._producer: AIOKafkaProducer | None = None
        self.deliveries: dict[tuple[str, str], BridgeDelivery] = {}
        self.groups: dict[tuple[str, str], BridgeGroup] = {}
        self.corrupt = 0
        """Ledger records that did not decode, since the start."""

    async def start(self) -> None:
        producer = AIOKafkaProducer(**self._kwargs, acks="all", linger_ms=2)
        await producer.start()
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    def get(self, route: str, incident_id: str) -> BridgeDelivery | None:
        return self.deliveries.get((route, incident_id))

    def group(self, route: str, group: str) -> BridgeGroup | None:
        return self.groups.get((route, group))

    def entries(self, routes: frozenset[str] | None = None) -> Iterator[BridgeDelivery]:
        """Every delivery entry (of ``routes`` when given)."""
        for (route, _), entry in self.deliveries.items():
            if routes is None or route in routes:
                yield entry

    async def write(self, entry: BridgeDelivery | BridgeGroup) -> None:
        """Put ``entry`` on the topic and in memory, returning once the broker acked it."""
        if self._producer is None:
            raise RuntimeError("the ledger is not started")
        if isinstance(entry, BridgeDelivery):
            key = delivery_key(entry.route, entry.incident_id)
        else:
            key = group_key(entry.route, entry.group)
        await self._producer.send_and_wait(self.topic, encode(entry), key=key)
        self.keep(entry)

    async def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Produce one record to another topic (the dead letters), returning once acked."""
        if self._producer is None:
            raise RuntimeError("the ledger is not started")
        await self._producer.send_and_wait(topic, value, key=key)

    def keep(self, entry: BridgeDelivery | BridgeGroup) -> None:
        """Hold ``entry`` in memory (:meth:`write` also puts it on the topic)."""
        if isinstance(entry, BridgeDelivery):
            self.deliveries[(entry.route, entry.incident_id)] = entry
        else:
            self.groups[(entry.route, entry.group)] = entry

    async def restore(self, timeout_seconds: float = 120.0) -> int:
        """Read the whole topic to the end it had when this began; entries kept."""
        reader = AIOKafkaConsumer(
            **self._kwargs,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
        )
        await reader.start()
        latest: dict[bytes, bytes | None] = {}
        try:
            await reader.topics()
            starts: dict[TopicPartition, int | None] = {
                TopicPartition(self.topic, p): None
                for p in sorted(reader.partitions_for_topic(self.topic) or ())
            }
            async with aclosing(
                read_range(reader, starts, timeout_seconds, release=False)
            ) as batches:
                async for records in batches:
                    for record in records:
                        if record.key is not None:
                            latest[record.key] = record.value
        finally:
            await reader.stop()
        self.deliveries.clear()
        self.groups.clear()
        for key, value in latest.items():
            if value is None:
                continue
            try:
                self.keep(_decode(value))
            except (RecordError, msgspec.MsgspecError) as exc:
                self.corrupt += 1
                log.error(
                    "ledger record %r on %s does not decode (%s); ignored", key, self.topic, exc
                )
        return len(self.deliveries)
