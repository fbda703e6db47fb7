"""The state topic: where a worker writes key snapshots, and reads them back.

Every ``snapshot_seconds`` the worker writes each changed key's state (msgpack) to the
compacted state topic, on the partition its raw records use (:func:`partition_for`); a
worker given raw partitions reads the same state partitions to their end and adopts the
newest snapshot of every key.

Traps: the end offset is read before reading starts, and reading stops there; offsets have
gaps and may begin above 0, so the loop ends on the consumer position; a tombstone deletes
the key, and a snapshot that does not decode is logged and counted (the key starts empty,
never a crash loop); the topic also holds one mark per raw partition
(:mod:`streams.app.published`), returned apart, never decoded as a state.
docs/operations.md, design notes: the state topic.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from contextlib import aclosing
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from connectors.kafka.producer import partition_of
from streams.app.published import Offsets, decode_mark, is_mark
from streams.app.ranges import read_range
from streams.core.snapshot import decode_state

log = logging.getLogger("gputriage.processor")


def partition_for(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` (murmur2, as Java's)."""
    return partition_of(key.encode(), partitions)


class ChangelogReader:
    """Reads whole partitions of the state topic (no consumer group, nothing committed)."""

    def __init__(self, client_kwargs: Mapping[str, Any], topic: str) -> None:
        self.topic = topic
        self._consumer = AIOKafkaConsumer(
            **client_kwargs,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 << 20,
            fetch_max_wait_ms=50,
        )
        self.corrupt = 0
        """Snapshots that did not decode, since the start."""

    async def start(self) -> None:
        await self._consumer.start()

    async def stop(self) -> None:
        await self._consumer.stop()

    async def read(
        self, partitions: Iterable[int], timeout_seconds: float = 60.0
    ) -> tuple[dict[int, list[Any]], dict[int, Offsets]]:
        """The newest decoded state of every key on ``partitions``, by partition (a lane's
        states are on its own partition number), and their marks."""
        starts = {TopicPartition(self.topic, p): None for p in sorted(partitions)}
        latest: dict[tuple[int, bytes], bytes | None] = {}
        async with aclosing(read_range(self._consumer, starts, timeout_seconds)) as batches:
            async for records in batches:
                for record in records:
                    if record.key is not None:
                        latest[record.partition, record.key] = record.value
        states: dict[int, list[Any]] = {}
        marks: dict[int, Offsets] = {}
        for (partition, key), value in latest.items():
            if value is None:
                continue
            if is_mark(key):
                mark = decode_mark(key, value)
                if mark is not None:
                    marks[mark[0]] = mark[1]
                continue
            try:
                states.setdefault(partition, []).append(decode_state(value))
            except Exception as exc:  # one bad snapshot must not stop the worker for good
                self.corrupt += 1
                log.error(
                    "state of %r on %s does not decode (%r); it starts empty", key, self.topic, exc
                )
        return states, marks
