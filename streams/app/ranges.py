"""Reading partitions from given offsets to their end, without a consumer group.

The state topic's restore (:mod:`streams.app.changelog`) and the incident topic's scan
(:mod:`streams.app.published`) read partitions from a start to the end they had when the
read began, then hand the consumer back unassigned.

Traps: the ends are asked before reading (a moving end is never reached); the loop ends on
the consumer's position, not the last offset + 1 (gaps, and Tansu's end is its last
batch's base + 1), so records past the end may come and the caller gets them; a consumer
unassigned and stopped at once stalled a group join on the tests' broker: pass
``release=False`` then. docs/operations.md, design notes: reading to the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition


async def read_range(
    consumer: AIOKafkaConsumer,
    starts: Mapping[TopicPartition, int | None],
    timeout_seconds: float,
    *,
    release: bool = True,
) -> AsyncGenerator[list[Any], None]:
    """Batches of records of ``starts``' partitions, each from its start (None: the
    beginning) to its end; ``TimeoutError`` past ``timeout_seconds``. The caller may stop early;
    the consumer is unassigned either way, unless ``release`` is False (a caller that
    stops the consumer right after: see the module's traps)."""
    tps = list(starts)
    if not tps:
        return
    ends = await consumer.end_offsets(tps)
    remaining = {tp for tp in tps if ends[tp] > (starts[tp] or 0)}
    consumer.assign(tps)
    try:
        for tp in tps:
            start = starts[tp]
            if start is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, start)
        loop_time = asyncio.get_running_loop().time  # getmany's timeouts follow it too
        deadline = loop_time() + timeout_seconds
        while remaining:
            if loop_time() > deadline:
                raise TimeoutError(
                    f"reading {sorted((tp.topic, tp.partition) for tp in remaining)} "
                    f"took over {timeout_seconds:g} s"
                )
            batches = await consumer.getmany(*remaining, timeout_ms=200, max_records=10_000)
            for records in batches.values():
                if records:
                    yield records
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        if release:
            consumer.assign([])
