"""Reading a whole topic from its beginning: what a compacted topic's readers share.

``gputriage status`` reads the incident topic to its end and stops; ``gputriage writeback``
reads it to its end, converges, then follows. Both start from the first offset still held
and need to know when they have read everything that was there when they started.

Trap: the end offsets are looked up *before* ``assign()``: aiokafka answers them through
the same fetcher the assignment starts, and asking after it can race the first fetch.
"""

from __future__ import annotations

from typing import Any


async def assign_from_beginning(consumer: Any, topic: str) -> dict[Any, int]:
    """Assign every partition of ``topic`` (as the consumer's metadata knows them) from its
    first offset still held; the end offset, at this moment, of each that holds records."""
    from aiokafka import TopicPartition  # noqa: PLC0415 - aiokafka costs ~0.2 s to import

    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    ends = await consumer.end_offsets(tps)
    begins = await consumer.beginning_offsets(tps)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, begins[tp])
    return {tp: ends[tp] for tp in tps if begins[tp] < ends[tp]}
